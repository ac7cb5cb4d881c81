//! `routing-link`: a proxy that puts an emulated network link in front of a
//! server, so any grpcurl or ghz command from the chapter runs over a WAN.
//! It is the same link the clients use in-process with `--link`
//! (`routing_clients::link`): a one-way delay each way, a rate behind a
//! bounded queue, a round trip to set up each connection, and optionally a
//! NAT that forgets idle flows. All connections share the link's rate.
//!
//! Run with (the server on 9180, here without gzip, so every byte counts):
//!
//! ```console
//! $ cargo run --release -p routing-server -- --no-gzip &
//! $ cargo run --release -p routing-clients --bin routing-link -- --listen 127.0.0.1:9181 --upstream 127.0.0.1:9180 --preset wan &
//! $ /usr/bin/time -f '%e s' grpcurl -plaintext -max-msg-sz 8388608 -d '{"pageSize":25}' 127.0.0.1:9181 shipping.routing.v1.RoutingService/ListRoutes >/dev/null
//! 2.83 s
//! ```
//!
//! The same call straight to 9180 took 0.23 s. Over the link, the 5.0 MB
//! catalog needs 5.0 MB × 8 ÷ 20 Mbit/s = 2.0 s on the wire, and grpcurl's
//! connection and reflection look-ups cost about 8 round trips of 60 ms (a
//! GetQuote through the link took 0.48 to 0.51 s). With gzip on, the same
//! ListRoutes took 0.89 s. It prints nothing on stdout; logs go to stderr
//! (`RUST_LOG=debug` shows each connection).
//! Ctrl+C or SIGTERM stops it: no new connections, and up to 5 s for the open
//! ones to finish.

use std::{net::SocketAddr, process::ExitCode};

use clap::Parser;
use routing_clients::{
    Error, LinkArgs, init_tracing_at,
    link_proxy::{self, MAX_CONNECTIONS, ProxyConfig},
    target::Target,
};
use tokio::net::TcpListener;

/// Where routing-link listens unless told otherwise: the port after the server's.
const DEFAULT_LISTEN: &str = "127.0.0.1:9181";

#[derive(Debug, Parser)]
#[command(
    version,
    about = "A proxy through an emulated network link (delay, rate, queue, NAT), for grpcurl and ghz by hand"
)]
struct Args {
    /// Address to listen on.
    #[arg(long, env = "ROUTING_LINK_LISTEN", default_value = DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// The server behind the link: host:port or http://host:port.
    #[arg(long, env = "ROUTING_LINK_UPSTREAM", default_value = routing_clients::target::DEFAULT_TARGET)]
    upstream: Target,
    #[command(flatten)]
    link: LinkArgs,
    /// Connections proxied at once; more are closed on arrival.
    #[arg(long, default_value_t = MAX_CONNECTIONS as u64, value_parser = clap::value_parser!(u64).range(1..=1024))]
    max_connections: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    init_tracing_at("info");
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Error> {
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let config = ProxyConfig {
        upstream: args.upstream.to_string(),
        link: args.link.link(),
        // At most 1024, so the conversion cannot fail.
        max_connections: usize::try_from(args.max_connections).unwrap_or(MAX_CONNECTIONS),
    };
    link_proxy::serve(listener, config, link_proxy::shutdown_signal()).await?;
    Ok(())
}
