//! Every repository path the README and `docs/*.md` name exists, and every
//! link between them lands on a heading that exists: a removed or renamed
//! file, or a moved section, cannot stay referenced.
//!
//! Two kinds of reference are checked. Markdown links (`[text](path)`,
//! `[text](path#anchor)`, `[text](#anchor)`) are resolved from the file that
//! holds them; web links are skipped. Backticked paths outside code blocks
//! (`` `server/src/knobs.rs` ``, `` `server/src/routing/{quote,catalog}.rs` ``) are
//! resolved from the repository root when their first component is one of
//! the repository's top-level directories or files.

use std::{
    collections::HashSet,
    fs,
    path::{Path, PathBuf},
};

/// Top-level names a backticked path may start with.
const ROOTS: &[&str] = &[
    "contracts",
    "server",
    "clients",
    "harness",
    "frames",
    "peer",
    "interop",
    "ci",
    ".ci",
    "docs",
    "verify.sh",
    "Dockerfile",
    "compose.yaml",
    "Cargo.toml",
    "Cargo.lock",
    "README.md",
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("server/ has a parent")
        .to_path_buf()
}

/// README.md and every `docs/*.md` that exists.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut docs = vec![root.join("README.md")];
    if let Ok(entries) = fs::read_dir(root.join("docs")) {
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        found.sort();
        docs.extend(found);
    }
    docs
}

/// The text outside fenced code blocks, line by line.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// Link targets: what sits between `](` and the next `)`.
fn links(line: &str) -> Vec<&str> {
    line.match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &line[at + 2..];
            rest.find(')').map(|end| rest[..end].trim())
        })
        .collect()
}

/// Inline code spans: text between pairs of single backticks.
fn code_spans(line: &str) -> Vec<&str> {
    line.split('`').skip(1).step_by(2).collect()
}

/// `a/{b,c}.rs` as `a/b.rs` and `a/c.rs`; a `...` alternative stands for
/// "and more" and is dropped.
fn expand_braces(path: &str) -> Vec<String> {
    match (path.find('{'), path.find('}')) {
        (Some(open), Some(close)) if open < close => path[open + 1..close]
            .split(',')
            .map(str::trim)
            .filter(|alt| *alt != "..." && !alt.is_empty())
            .flat_map(|alt| expand_braces(&format!("{}{alt}{}", &path[..open], &path[close + 1..])))
            .collect(),
        _ => vec![path.to_string()],
    }
}

/// A backticked span that names a repository path, if it is one.
fn repo_path(span: &str) -> Option<&str> {
    let span = span.trim();
    let first = span.split('/').next()?;
    let looks_like_path = !span.contains(' ') && !span.contains('*') && !span.contains("::");
    (looks_like_path && ROOTS.contains(&first)).then_some(span)
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as
/// hyphens; a repeated heading gets `-1`, `-2`, ...
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    for line in prose(text) {
        let Some(title) = line.strip_prefix('#') else {
            continue;
        };
        let title = title.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut unique = slug.clone();
        let mut n = 0;
        while seen.contains(&unique) {
            n += 1;
            unique = format!("{slug}-{n}");
        }
        seen.insert(unique);
    }
    seen
}

/// Every broken reference in one document, as "what: why".
fn broken_references(root: &Path, doc: &Path) -> Vec<String> {
    let text = fs::read_to_string(doc).expect("document is readable");
    let here = doc.parent().expect("document has a directory");
    let mut broken = Vec::new();
    for line in prose(&text) {
        for link in links(line) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = link.split_once('#').unwrap_or((link, ""));
            let target = if path.is_empty() {
                doc.to_path_buf()
            } else {
                here.join(path)
            };
            if !target.exists() {
                broken.push(format!(
                    "link ({link}): {} does not exist",
                    target.display()
                ));
            } else if !anchor.is_empty() && target.extension().is_some_and(|x| x == "md") {
                let headings = anchors(&fs::read_to_string(&target).unwrap_or_default());
                if !headings.contains(anchor) {
                    broken.push(format!("link ({link}): no heading #{anchor}"));
                }
            }
        }
        for span in code_spans(line) {
            let Some(path) = repo_path(span) else {
                continue;
            };
            for path in expand_braces(path) {
                if !root.join(&path).exists() {
                    broken.push(format!("`{span}`: {path} does not exist"));
                }
            }
        }
    }
    broken
}

/// Given the README and every document under docs/, when each reference is
/// resolved, then none is broken.
#[test]
fn every_path_and_link_in_the_docs_exists() {
    let root = repo_root();
    let docs = documents(&root);
    assert!(docs.len() > 1, "expected README.md and docs/*.md: {docs:?}");
    let broken: Vec<String> = docs
        .iter()
        .flat_map(|doc| {
            let name = doc.strip_prefix(&root).unwrap_or(doc).display().to_string();
            broken_references(&root, doc)
                .into_iter()
                .map(move |b| format!("{name}: {b}"))
        })
        .collect();
    assert!(
        broken.is_empty(),
        "broken references:\n{}",
        broken.join("\n")
    );
}

/// The checker itself: a removed file named in braces, a missing heading and
/// a missing linked file are each caught; web links and code blocks are not
/// checked.
#[test]
fn the_checker_catches_what_it_should() {
    let root = repo_root();
    let scratch = std::env::temp_dir().join(format!("doc-paths-{}", std::process::id()));
    fs::create_dir_all(&scratch).expect("scratch dir");
    let doc = scratch.join("sample.md");
    // Given a document with one good and three bad references, and a code
    // block and a web link that must be ignored.
    fs::write(
        &doc,
        "# A title\n\
         See `server/src/{knobs,compression}.rs` and [t](#a-title), [u](#gone),\n\
         [v](missing.md), [w](https://example.com/x).\n\
         ```console\n$ cat `server/src/nothing.rs`\n```\n",
    )
    .expect("write sample");
    // When it is checked.
    let broken = broken_references(&root, &doc);
    let _ = fs::remove_dir_all(&scratch);
    // Then exactly the three bad ones are reported.
    assert_eq!(broken.len(), 3, "{broken:#?}");
    for expected in [
        "no heading #gone",
        "missing.md does not exist",
        "server/src/compression.rs does not exist",
    ] {
        assert!(
            broken.iter().any(|b| b.contains(expected)),
            "{expected}: {broken:#?}"
        );
    }
}
