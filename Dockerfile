# syntax=docker/dockerfile:1
#
# The chapter's image: routing-server, the six client binaries and routing-link.
#
#   docker build -t grpc-tuning/routing-server:dev .     (or: docker compose build)
#
# Base images are build arguments, so a registry mirror can stand in:
#   --build-arg RUST_IMAGE=mirror.example/library/rust:1.95-bookworm
# and so can binaries built elsewhere (CI's Podman run; see ci/standin-images.sh):
#   --build-arg BINARIES=<image holding the binaries in /out>

# The full image, not -slim: the server's allocator (jemalloc, see
# server/src/main.rs) is built from C with `make`, which -slim lacks.
ARG RUST_IMAGE=docker.io/library/rust:1.95-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot
# The stage (or image) whose /out holds the binaries: by default the build below.
ARG BINARIES=build

# --- build: compile in the official Rust image. No protoc is needed: the
# contracts crate parses the protos with protox, a Rust protobuf compiler.
FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
# Every workspace member, one line each: cargo loads the whole workspace, so
# one left out breaks this build (server/tests/dockerfile.rs checks it).
COPY contracts contracts
COPY frames frames
COPY peer peer
COPY server server
COPY clients clients
COPY balancer balancer
COPY harness harness
# h2 with two buffer sizes and its frame queue patched (Cargo.toml's [patch.crates-io]).
COPY vendor vendor
# BuildKit cache mounts keep the crate registry and target/ between builds,
# so a code change recompiles only our crates, not the dependency tree.
# --workspace: every member compiles here, including tools that do not ship,
# so the image build proves what a reader's `cargo build` would.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --workspace \
 && mkdir -p /out \
 && cp target/release/routing-server target/release/footgun-client target/release/pooled-client \
       target/release/gzip-client target/release/keepalive-client target/release/window-client \
       target/release/balance-client target/release/deadline-client target/release/retry-client \
       target/release/routing-link /out/

FROM ${BINARIES} AS binaries

# --- runtime: distroless cc (glibc, no shell), as the nonroot user.
FROM ${RUNTIME_IMAGE}
COPY --from=binaries /out/ /usr/local/bin/
ENV PATH=/usr/local/bin \
    ROUTING_LISTEN=0.0.0.0:9000 \
    ROUTING_PROBE_ADDR=127.0.0.1:9000 \
    RUST_LOG=info
# distroless's "nonroot" user; numeric so it also works without /etc/passwd.
USER 65532:65532
EXPOSE 9000
HEALTHCHECK --interval=5s --timeout=3s --start-period=5s --retries=5 \
    CMD ["routing-server", "probe"]
CMD ["routing-server"]
