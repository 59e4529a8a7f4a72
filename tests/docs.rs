//! The documentation's links hold (issue 47): every relative link in the README, `docs/*.md`
//! and the chart's README names a file or directory that exists, and its `#anchor` a heading
//! (by GitHub's slug rules) or an `<a id>` of the target; links to this repository on GitHub
//! (the alert rules' `runbook_url`s among them) are checked the same way. External links are
//! not fetched. And the README, the page a user reads first, stays at most 450 lines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

/// The README's length limit (issue 46): what does not fit belongs in `docs/`.
const README_MAX_LINES: usize = 450;

/// This repository's files as GitHub serves them: such a link is checked as a relative one.
const REPO_BLOB: &str = "https://github.com/podset-operator/podset-operator/blob/main/";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The pages checked: the README, every `docs/*.md`, the chart's README if there is one.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    let chart = root().join("charts/podset-operator/README.md");
    if chart.exists() {
        pages.push(chart);
    }
    pages
}

/// A heading's anchor as GitHub makes it: the heading's text (inline code and link text
/// kept, their markup not), lower-cased, punctuation other than `-` and `_` removed, each
/// space a `-`.
fn slug(heading: &str) -> String {
    let text = strip_links(heading);
    text.chars()
        .flat_map(char::to_lowercase)
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// `[text](dest)` as `text`, as a heading renders it.
fn strip_links(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some((text, _, before, after)) = next_link(rest) {
        out.push_str(before);
        out.push_str(text);
        rest = after;
    }
    out.push_str(rest);
    out
}

/// The first inline link or image `[text](dest)` in `s`: its text, its destination, what
/// comes before it and what after.
fn next_link(s: &str) -> Option<(&str, &str, &str, &str)> {
    let mut from = 0;
    while let Some(open) = s[from..].find('[').map(|i| i + from) {
        // Nesting counted: `[![badge](img)](target)`, `(dest_(with)_parens)`.
        let close = matching(s, open, '[', ']')?;
        if s[close + 1..].starts_with('(') {
            let end = matching(s, close + 1, '(', ')')?;
            let before = &s[..open];
            let before = before.strip_suffix('!').unwrap_or(before);
            return Some((
                &s[open + 1..close],
                &s[close + 2..end],
                before,
                &s[end + 1..],
            ));
        }
        from = open + 1;
    }
    None
}

/// Where the `close` that matches the `open` at `at` is, nested pairs counted.
fn matching(s: &str, at: usize, open: char, close: char) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in s[at..].char_indices() {
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return Some(at + i);
            }
        }
    }
    None
}

/// A markdown page: its anchors, and its links with their line numbers.
struct Page {
    anchors: BTreeSet<String>,
    links: Vec<(usize, String)>,
}

/// Reads a page's headings, `<a id>`/`<a name>` anchors and links, outside fenced code
/// blocks and inline code spans.
fn parse(text: &str) -> Page {
    let mut anchors = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut links = Vec::new();
    let mut fence: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(open) = &fence {
            if trimmed.starts_with(open.as_str())
                && trimmed.trim_start_matches(open.as_str()).trim().is_empty()
            {
                fence = None;
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            let marker = trimmed.chars().next().unwrap();
            let len = trimmed.chars().take_while(|c| *c == marker).count();
            fence = Some(marker.to_string().repeat(len));
            continue;
        }
        let code_free = without_code_spans(line);
        if let Some(heading) = atx_heading(line) {
            // GitHub numbers a repeated heading's anchor: `x`, `x-1`, `x-2`.
            let base = slug(&heading);
            let n = seen.entry(base.clone()).or_insert(0);
            anchors.insert(if *n == 0 {
                base.clone()
            } else {
                format!("{base}-{n}")
            });
            *n += 1;
        }
        for attr in ["id=\"", "name=\""] {
            let mut rest = code_free.as_str();
            while let Some(at) = rest.find("<a ") {
                let tag_end = rest[at..].find('>').map_or(rest.len(), |e| at + e);
                let tag = &rest[at..tag_end];
                if let Some(v) = tag.find(attr) {
                    let value = &tag[v + attr.len()..];
                    if let Some(end) = value.find('"') {
                        anchors.insert(value[..end].to_string());
                    }
                }
                rest = &rest[tag_end..];
            }
        }
        let mut rest = code_free.as_str();
        while let Some((_, dest, _, after)) = next_link(rest) {
            links.push((i + 1, dest.to_string()));
            rest = after;
        }
        // Reference definitions: `[label]: dest`.
        if let Some(def) = trimmed.strip_prefix('[')
            && let Some((_, dest)) = def.split_once("]:")
        {
            links.push((i + 1, dest.trim().to_string()));
        }
    }
    Page { anchors, links }
}

/// `## Heading text` as `Heading text`; None for any other line.
fn atx_heading(line: &str) -> Option<String> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let rest = &line[indent..];
    let level = rest.chars().take_while(|c| *c == '#').count();
    if indent > 3 || level == 0 || level > 6 {
        return None;
    }
    let text = &rest[level..];
    if !(text.is_empty() || text.starts_with(' ') || text.starts_with('\t')) {
        return None;
    }
    // A closing run of `#`s is not part of the text.
    let text = text.trim();
    let text = text.trim_end_matches('#');
    Some(text.trim().to_string())
}

/// The line with each inline code span blanked out, so that a link or tag shown as code is
/// not read as one.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(open) = rest.find('`') {
        let ticks = rest[open..].chars().take_while(|c| *c == '`').count();
        let marker = "`".repeat(ticks);
        let body = &rest[open + ticks..];
        match body.find(&marker) {
            Some(close) => {
                out.push_str(&rest[..open]);
                out.push_str(&" ".repeat(ticks * 2 + close));
                rest = &body[close + ticks..];
            }
            None => break,
        }
    }
    out.push_str(rest);
    out
}

/// `a/b/../c` as `a/c`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// What is wrong with one link from `page` (None: it holds, or it is external).
fn check_link(page: &Path, dest: &str, parsed: &mut BTreeMap<PathBuf, Page>) -> Option<String> {
    // `<dest>` and a `"title"` after the destination are not part of it.
    let dest = dest.trim();
    let dest = dest.split_once(" \"").map_or(dest, |(d, _)| d).trim();
    let dest = dest
        .strip_prefix('<')
        .and_then(|d| d.strip_suffix('>'))
        .unwrap_or(dest);
    let (target, anchor) = if let Some(path) = dest.strip_prefix(REPO_BLOB) {
        let (path, anchor) = path
            .split_once('#')
            .map_or((path, None), |(p, a)| (p, Some(a)));
        (root().join(path), anchor)
    } else if dest.contains("://") || dest.starts_with("mailto:") {
        return None;
    } else {
        let (path, anchor) = dest
            .split_once('#')
            .map_or((dest, None), |(p, a)| (p, Some(a)));
        let path = path.replace("%20", " ");
        let target = if path.is_empty() {
            page.to_path_buf()
        } else if let Some(from_root) = path.strip_prefix('/') {
            root().join(from_root)
        } else {
            page.parent().unwrap().join(path)
        };
        (target, anchor)
    };
    let target = normalize(&target);
    if !target.starts_with(root()) {
        return Some(format!("{dest}: outside the repository"));
    }
    if !target.exists() {
        return Some(format!(
            "{dest}: {} does not exist",
            target.strip_prefix(root()).unwrap().display()
        ));
    }
    let anchor = anchor.filter(|a| !a.is_empty())?;
    if target.extension().is_none_or(|e| e != "md") {
        // An anchor into a source file (`#L10`) is GitHub's, not a heading.
        return None;
    }
    let page = parsed
        .entry(target.clone())
        .or_insert_with(|| parse(&std::fs::read_to_string(&target).unwrap()));
    if page.anchors.contains(anchor) {
        None
    } else {
        Some(format!(
            "{dest}: no heading or <a id> in {} has the anchor #{anchor}",
            target.strip_prefix(root()).unwrap().display()
        ))
    }
}

#[test]
fn relative_links_resolve() {
    let mut parsed = BTreeMap::new();
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let links = parse(&text).links;
        for (line, dest) in links {
            checked += 1;
            if let Some(why) = check_link(&page, &dest, &mut parsed) {
                broken.push(format!(
                    "{}:{line}: {why}",
                    page.strip_prefix(root()).unwrap().display()
                ));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the parser reading the pages?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// Every alert's `runbook_url` in the shipped rules (chart, kustomize, the rules `promtool`
/// tests) points at a section that exists: the README's alert anchors must not move.
#[test]
fn runbook_urls_resolve() {
    let mut parsed = BTreeMap::new();
    let mut broken = Vec::new();
    let mut checked = 0;
    for dir in ["charts", "config", "tests/alerts"] {
        for file in files(&root().join(dir)) {
            if file.extension().is_none_or(|e| e != "yaml" && e != "yml") {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            for (i, line) in text.lines().enumerate() {
                let Some(at) = line.find(REPO_BLOB) else {
                    continue;
                };
                let url = line[at..]
                    .split(|c: char| c.is_whitespace() || c == '"' || c == '\'')
                    .next()
                    .unwrap();
                checked += 1;
                if let Some(why) = check_link(&file, url, &mut parsed) {
                    broken.push(format!(
                        "{}:{}: {why}",
                        file.strip_prefix(root()).unwrap().display(),
                        i + 1
                    ));
                }
            }
        }
    }
    assert!(
        checked >= 6,
        "only {checked} runbook URLs found in charts/, config/, tests/alerts/"
    );
    assert!(
        broken.is_empty(),
        "runbook URLs that lead nowhere:\n{}",
        broken.join("\n")
    );
}

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn readme_is_at_most_450_lines() {
    let lines = std::fs::read_to_string(root().join("README.md"))
        .unwrap()
        .lines()
        .count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: move reference material into docs/"
    );
}

#[test]
fn slugs_follow_github() {
    assert_eq!(slug("Kubernetes versions"), "kubernetes-versions");
    assert_eq!(slug("What make test runs"), "what-make-test-runs");
    assert_eq!(
        slug("Kubernetes, etcd and containerd, built from their Go modules"),
        "kubernetes-etcd-and-containerd-built-from-their-go-modules"
    );
    assert_eq!(slug("W5: 100,000 pods"), "w5-100000-pods");
    assert_eq!(
        slug("The local cluster: how it works, and why"),
        "the-local-cluster-how-it-works-and-why"
    );
    assert_eq!(slug("snake_case and a-dash"), "snake_case-and-a-dash");
    assert_eq!(slug("A [linked](x.md) word"), "a-linked-word");
    let page = parse(
        "# Title\n## Twice\n## Twice\n```sh\n# not a heading\n[no](link.md)\n```\n`[no](code.md)` [yes](a.md#b)\n- <a id=\"x\"></a>**X**\n",
    );
    assert_eq!(
        page.anchors,
        ["title", "twice", "twice-1", "x"]
            .into_iter()
            .map(String::from)
            .collect()
    );
    assert_eq!(page.links, vec![(8, "a.md#b".to_string())]);
}
