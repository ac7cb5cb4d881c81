//! The Dockerfile's build stage must see every workspace member, and every
//! crate the workspace patches in from a path (`[patch.crates-io]`).
//!
//! `cargo build --locked` inside the image loads the whole workspace, so a
//! member or a patched crate that the build stage does not `COPY` breaks
//! `docker compose build` for every reader, while every host-side check
//! stays green. These tests read the root `Cargo.toml` and the `Dockerfile`
//! as text and fail `cargo test` instead.
//!
//! The parsers are deliberately small: they read the subset of TOML and of
//! Dockerfile syntax this repository uses, and say so when they meet more.

use std::path::{Path, PathBuf};

/// The name of the Dockerfile stage that compiles the workspace.
const BUILD_STAGE: &str = "build";

/// The workspace declares every member explicitly, and the build stage of
/// the real Dockerfile copies each of them and builds the whole workspace.
#[test]
fn every_workspace_member_is_copied_into_the_build_stage() {
    // Given the repository's own manifest, Dockerfile and .dockerignore
    let root = workspace_root();
    let manifest = read(&root.join("Cargo.toml"));
    let members = workspace_members(&manifest);
    let patched = patched_paths(&manifest);
    let stage = build_stage(&read(&root.join("Dockerfile")));
    let ignored = read(&root.join(".dockerignore"));

    // When each member and patched crate is looked up among the stage's COPY sources
    let missing = missing_members(&members, &stage);
    let missing_patches = missing_members(&patched, &stage);

    // Then none is missing, none is cut out of the build context, and the
    // stage compiles them all
    assert!(!members.is_empty(), "no [workspace] members in Cargo.toml");
    assert!(
        missing.is_empty(),
        "the Dockerfile's `{BUILD_STAGE}` stage does not COPY the workspace member(s) {missing:?}: \
         `cargo build --locked` inside the image would fail to load the workspace. \
         Add `COPY <dir> <dir>` beside the other members' COPY lines."
    );
    assert!(
        missing_patches.is_empty(),
        "the Dockerfile's `{BUILD_STAGE}` stage does not COPY the patched crate(s) {missing_patches:?} \
         ([patch.crates-io] in Cargo.toml): `cargo build --locked` inside the image would fail. \
         Add `COPY <dir> <dir>` beside the members' COPY lines."
    );
    for member in members.iter().chain(&patched) {
        assert!(
            !ignored
                .lines()
                .any(|line| normalise(line.trim()) == *member),
            ".dockerignore excludes the workspace member {member:?} from the build context"
        );
    }
    assert!(
        stage
            .runs
            .iter()
            .any(|run| run.contains("cargo build") && run.contains("--workspace")),
        "the `{BUILD_STAGE}` stage should run `cargo build ... --workspace`, so every member \
         compiles in the image, not just the shipped binaries: {:?}",
        stage.runs
    );
}

/// The check itself: a Dockerfile that forgets one member is caught, and
/// `COPY . .` or a parent directory counts as copying it.
#[test]
fn a_member_missing_from_the_build_stage_is_reported() {
    // Given a workspace of three members, one of them nested
    let members = workspace_members(
        "[package]\nmembers = [\"not-this\"]\n\n[workspace]\nresolver = \"3\"\n\
         members = [\n  \"contracts\", # the protos\n  \"server\",\n  \"tools/harness\",\n]\n",
    );
    assert_eq!(members, ["contracts", "server", "tools/harness"]);

    // When the build stage copies two of them (and the runtime stage all)
    let dockerfile = "FROM rust AS build\nCOPY Cargo.toml Cargo.lock ./\n\
                      COPY --link ./contracts/ contracts\nCOPY server \\\n    server\n\
                      # COPY tools tools\nRUN cargo build --workspace\n\
                      FROM scratch\nCOPY . .\n";

    // Then the third is reported, and only it
    assert_eq!(
        missing_members(&members, &build_stage(dockerfile)),
        ["tools/harness"]
    );

    // And copying the parent directory, or the whole context, covers it
    for copy in [
        "COPY tools tools",
        "COPY . /src",
        "COPY [\"tools\", \"tools\"]",
    ] {
        let fixed = dockerfile.replace("# COPY tools tools", copy);
        assert!(
            missing_members(&members, &build_stage(&fixed)).is_empty(),
            "{copy}"
        );
    }
}

#[test]
fn patched_crates_are_read_from_the_manifest() {
    // Given a manifest with a path patch, a registry patch and comments
    let manifest = "[workspace]\nmembers = [\"server\"]\n\n[patch.crates-io]\n\
                    # h2 = { path = \"old/h2\" }\n\
                    h2 = { path = \"./vendor/h2/\" } # two buffers\n\
                    tower = { git = \"https://example.invalid/tower\" }\n\n\
                    [profile.release]\nstrip = true\n";

    // When its patched paths are read
    let patched = patched_paths(manifest);

    // Then only the path patch is found, normalised
    assert_eq!(patched, ["vendor/h2"]);
}

/// The COPY sources and RUN commands of one Dockerfile stage.
#[derive(Debug, Default)]
struct Stage {
    /// Sources of every `COPY` from the build context (not `--from=`).
    copied: Vec<String>,
    /// Every `RUN` command, continuation lines joined.
    runs: Vec<String>,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the server crate lives inside the workspace")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The `members` array of the `[workspace]` table, comments removed.
fn workspace_members(manifest: &str) -> Vec<String> {
    let mut in_workspace = false;
    let mut array: Option<String> = None;
    for line in manifest.lines() {
        // No member path here contains '#', so it always starts a comment.
        let line = line.split('#').next().unwrap_or_default().trim();
        if let Some(text) = array.as_mut() {
            text.push_str(line);
        } else if line.starts_with('[') {
            in_workspace = line == "[workspace]";
        } else if in_workspace
            && let Some((key, value)) = line.split_once('=')
            && key.trim() == "members"
        {
            array = Some(value.trim().to_owned());
        }
        if array.as_ref().is_some_and(|text| text.contains(']')) {
            break;
        }
    }
    let array = array.expect("Cargo.toml has a [workspace] table with a members array");
    let members: Vec<String> = quoted_strings(&array).map(|m| normalise(&m)).collect();
    for member in &members {
        assert!(
            !member.contains(['*', '?', '[']),
            "member {member:?} is a glob: list members explicitly, so this test can check each"
        );
    }
    members
}

/// The `path` of every crate in a `[patch.*]` table, one crate a line
/// (`name = { path = "dir" }`), comments removed.
fn patched_paths(manifest: &str) -> Vec<String> {
    let mut in_patch = false;
    let mut paths = Vec::new();
    for line in manifest.lines() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.starts_with('[') {
            in_patch = line.starts_with("[patch.");
        } else if in_patch && let Some((_, table)) = line.split_once('=') {
            let mut fields = table.split(',');
            if let Some(path) = fields.find_map(|field| {
                let (key, value) = field.trim_start_matches([' ', '{']).split_once('=')?;
                (key.trim() == "path").then(|| quoted_strings(value).next())?
            }) {
                paths.push(normalise(&path));
            }
        }
    }
    paths
}

/// The stage named [`BUILD_STAGE`]: its COPY sources and RUN commands.
fn build_stage(dockerfile: &str) -> Stage {
    let mut stage: Option<Stage> = None;
    for instruction in instructions(dockerfile) {
        let (keyword, rest) = instruction
            .split_once(char::is_whitespace)
            .unwrap_or((instruction.as_str(), ""));
        let rest = rest.trim();
        match keyword.to_ascii_uppercase().as_str() {
            "FROM" => {
                if stage.is_some() {
                    break; // the next stage starts: the build stage is complete
                }
                let words: Vec<&str> = rest.split_whitespace().collect();
                if let [.., as_, name] = words.as_slice()
                    && as_.eq_ignore_ascii_case("as")
                    && *name == BUILD_STAGE
                {
                    stage = Some(Stage::default());
                }
            }
            "COPY" | "ADD" => {
                if let Some(stage) = stage.as_mut() {
                    stage.copied.extend(copy_sources(rest));
                }
            }
            "RUN" => {
                if let Some(stage) = stage.as_mut() {
                    stage.runs.push(rest.to_owned());
                }
            }
            _ => {}
        }
    }
    stage.unwrap_or_else(|| panic!("the Dockerfile has no `FROM ... AS {BUILD_STAGE}` stage"))
}

/// Dockerfile instructions: comment lines dropped, `\` continuations joined.
fn instructions(dockerfile: &str) -> Vec<String> {
    let mut instructions = Vec::new();
    let mut current = String::new();
    for line in dockerfile.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || trimmed.is_empty() {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(continued) => {
                current.push_str(continued);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                instructions.push(std::mem::take(&mut current));
            }
        }
    }
    if !current.trim().is_empty() {
        instructions.push(current);
    }
    instructions
}

/// The source paths of a COPY (shell or JSON form); none for `--from=` copies,
/// which take files from another stage rather than the build context.
fn copy_sources(arguments: &str) -> Vec<String> {
    let mut words: Vec<String> = if arguments.trim_start().starts_with('[') {
        quoted_strings(arguments).collect()
    } else {
        arguments.split_whitespace().map(str::to_owned).collect()
    };
    let flags = words
        .iter()
        .take_while(|word| word.starts_with("--"))
        .count();
    if words[..flags].iter().any(|flag| flag.starts_with("--from")) {
        return Vec::new();
    }
    words.drain(..flags);
    words.pop(); // the destination
    words.iter().map(|word| normalise(word)).collect()
}

/// Each member not covered by a COPY source: the member itself, one of its
/// parent directories, or the whole context (`.`).
fn missing_members(members: &[String], stage: &Stage) -> Vec<String> {
    members
        .iter()
        .filter(|member| {
            !stage.copied.iter().any(|source| {
                source == "." || *member == source || member.starts_with(&format!("{source}/"))
            })
        })
        .cloned()
        .collect()
}

/// The strings between double quotes in `text`, in order.
fn quoted_strings(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split('"').skip(1).step_by(2).map(str::to_owned)
}

/// A context path as written or as a member: no leading `./`, no trailing `/`.
fn normalise(path: &str) -> String {
    let path = path.strip_prefix("./").unwrap_or(path);
    match path.trim_end_matches('/') {
        "" => ".".to_owned(), // "./" is the whole context
        trimmed => trimmed.to_owned(),
    }
}
