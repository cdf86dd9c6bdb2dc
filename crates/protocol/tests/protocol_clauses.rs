//! Every protocol clause the repository cites has an anchor in `docs/protocol.md` (issue 39).
//!
//! Code comments, test messages, migrations and docs cite Skua's protocol clauses by number:
//! `N12`, `(N12)`, lists such as `N3/N31`, and spans such as `N24–N26` or `N24-N26`, where every
//! number of the span must exist. Each clause is written out under "Protocol clauses" at the end
//! of `docs/protocol.md`: an anchor line `<a id="n12"></a>`, then the heading
//! `### N12 — short title`, then the clause in the project's own words. This test fails, naming
//! file and line, when a cited number has no such anchor, or an anchor lacks its heading.
//!
//! Scanned: `crates/**/*.rs` (only comments and string literals, so `N12` as an identifier in
//! code is no citation), `crates/**/*.py` and `interop/**/*.py` (a lint code after `noqa`, such
//! as `# noqa: N802`, is no citation), `migrations/**/*.sql`, `docs/**/*.md` and `README.md`.
//! A citation is `N` plus one to three digits, standing alone (`FN12`, `N_12`, `N1234` are not).
//! This file is not scanned: its examples are no citations.
//!
//! To add a clause: take the next free number (a number is never renumbered or reused), append
//! `<a id="nNN"></a>` and `### NNN — short title` with the clause, in the project's words, to
//! "Protocol clauses" in `docs/protocol.md`, then cite it as `NNN` in comments and tests.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The repository root: this crate lives in `crates/protocol`.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Collects the files under `dir` whose name ends in `.{ext}`, skipping build output, caches
/// and hidden directories (a Python virtualenv, `.git`).
fn walk(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            let skipped = ["target", "node_modules", "__pycache__"];
            if !name.starts_with('.') && !skipped.contains(&name.as_str()) {
                walk(&path, ext, out);
            }
        } else if path.extension().is_some_and(|e| e == ext) {
            out.push(path);
        }
    }
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Reads `N` plus 1–3 digits at `i`, standing alone on its right; returns the number and the
/// index after it.
fn clause_at(c: &[char], i: usize) -> Option<(u32, usize)> {
    if c.get(i) != Some(&'N') {
        return None;
    }
    let mut j = i + 1;
    while j < c.len() && c[j].is_ascii_digit() {
        j += 1;
    }
    let digits = j - i - 1;
    if !(1..=3).contains(&digits) || c.get(j).is_some_and(|&d| is_word(d)) {
        return None;
    }
    let n = c[i + 1..j].iter().collect::<String>().parse().ok()?;
    Some((n, j))
}

/// The clause numbers cited in one line of prose: `N12`, `N3/N31`, `N24–N26` (every number of
/// the span), `N24-N26`, `N24–26`.
fn citations(line: &str) -> BTreeSet<u32> {
    let c: Vec<char> = line.chars().collect();
    let mut found = BTreeSet::new();
    let mut i = 0;
    while i < c.len() {
        let alone_on_left = i == 0 || !is_word(c[i - 1]);
        let Some((a, end)) = alone_on_left.then(|| clause_at(&c, i)).flatten() else {
            i += 1;
            continue;
        };
        found.insert(a);
        i = end;
        if matches!(c.get(end), Some('–' | '-')) {
            let start = end + 1;
            let to = if c.get(start) == Some(&'N') {
                clause_at(&c, start)
            } else {
                let mut prefixed = vec!['N'];
                prefixed.extend(&c[start..]);
                clause_at(&prefixed, 0).map(|(n, j)| (n, start + j - 1))
            };
            if let Some((b, after)) = to {
                found.extend(a.min(b)..=a.max(b));
                i = after;
            }
        }
    }
    found
}

/// The comments and string literals of Rust source, with all code blanked to spaces and every
/// newline kept, so line numbers stay right and identifiers in code are never read as citations.
fn rust_prose(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out: Vec<char> = c.iter().map(|&ch| if ch == '\n' { '\n' } else { ' ' }).collect();
    let keep = |out: &mut Vec<char>, from: usize, to: usize| out[from..to].copy_from_slice(&c[from..to]);
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            let end = c[i..].iter().position(|&ch| ch == '\n').map_or(c.len(), |p| i + p);
            keep(&mut out, i, end);
            i = end;
        } else if c[i] == '/' && next == Some('*') {
            let (mut j, mut depth) = (i + 2, 1);
            while j < c.len() && depth > 0 {
                if c[j] == '/' && c.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 1;
                } else if c[j] == '*' && c.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 1;
                }
                j += 1;
            }
            keep(&mut out, i, j.min(c.len()));
            i = j;
        } else if c[i] == 'r' && (i == 0 || !is_word(c[i - 1]) || c[i - 1] == 'b' || c[i - 1] == 'c') {
            // A raw string r"…" / r#"…"#; otherwise an identifier starting with r.
            let hashes = c[i + 1..].iter().take_while(|&&ch| ch == '#').count();
            if c.get(i + 1 + hashes) != Some(&'"') {
                i += 1;
                continue;
            }
            let body = i + 2 + hashes;
            let mut j = body;
            while j < c.len()
                && !(c[j] == '"' && c[j + 1..].iter().take(hashes).filter(|&&ch| ch == '#').count() == hashes)
            {
                j += 1;
            }
            keep(&mut out, body, j.min(c.len()));
            i = j + 1 + hashes;
        } else if c[i] == '"' {
            let mut j = i + 1;
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            keep(&mut out, i + 1, j.min(c.len()));
            i = j + 1;
        } else if c[i] == '\'' {
            // A char literal ('x', '"', '\n', '\u{..}') is skipped whole; a lifetime is code.
            if next == Some('\\') {
                i = c[(i + 3).min(c.len())..].iter().position(|&ch| ch == '\'').map_or(c.len(), |p| i + 4 + p);
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out.into_iter().collect()
}

/// A Python line without its `noqa` lint codes (`# noqa: N802` names a pep8-naming rule).
fn without_noqa(line: &str) -> &str {
    line.find("noqa").map_or(line, |at| &line[..at])
}

/// Every citation in the scanned files: clause number → the places (`file:line`) citing it.
fn cited(root: &Path) -> BTreeMap<u32, Vec<String>> {
    let mut files = Vec::new();
    walk(&root.join("crates"), "rs", &mut files);
    walk(&root.join("crates"), "py", &mut files);
    walk(&root.join("interop"), "py", &mut files);
    walk(&root.join("migrations"), "sql", &mut files);
    walk(&root.join("docs"), "md", &mut files);
    files.push(root.join("README.md"));
    assert!(files.len() > 100, "found only {} files under {}: wrong root?", files.len(), root.display());
    let mut by_clause: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    // This file's own examples (`N802`, made-up spans) are no citations.
    let this_file = Path::new(file!()).file_name().expect("file name");
    for path in files {
        if path.ends_with(Path::new("protocol/tests").join(this_file)) {
            continue;
        }
        let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let ext = path.extension().map(|e| e.to_string_lossy().into_owned()).unwrap_or_default();
        let text = if ext == "rs" { rust_prose(&text) } else { text };
        let shown = path.strip_prefix(root).unwrap_or(&path).display().to_string();
        for (n, line) in text.lines().enumerate() {
            let line = if ext == "py" { without_noqa(line) } else { line };
            for clause in citations(line) {
                by_clause.entry(clause).or_default().push(format!("{shown}:{}", n + 1));
            }
        }
    }
    by_clause
}

/// The clause anchors of `docs/protocol.md`, each checked to be followed by its `### N…` heading.
fn anchors(protocol_md: &str) -> Result<BTreeSet<u32>, Vec<String>> {
    let (mut found, mut problems) = (BTreeSet::new(), Vec::new());
    let lines: Vec<&str> = protocol_md.lines().collect();
    for (n, line) in lines.iter().enumerate() {
        let Some(rest) = line.trim().strip_prefix("<a id=\"n") else { continue };
        let Some(number) = rest.strip_suffix("\"></a>").and_then(|d| d.parse::<u32>().ok()) else {
            problems.push(format!("docs/protocol.md:{}: malformed clause anchor {line:?}", n + 1));
            continue;
        };
        let heading = lines[n + 1..].iter().find(|l| !l.trim().is_empty()).copied().unwrap_or("");
        if !heading.starts_with(&format!("### N{number} ")) {
            problems.push(format!(
                "docs/protocol.md:{}: anchor n{number} is not followed by a heading `### N{number} — title`",
                n + 1
            ));
        }
        if !found.insert(number) {
            problems.push(format!("docs/protocol.md:{}: anchor n{number} appears twice", n + 1));
        }
    }
    if problems.is_empty() { Ok(found) } else { Err(problems) }
}

#[test]
fn every_cited_clause_has_an_anchor_in_protocol_md() {
    let root = root();
    let doc = fs::read_to_string(root.join("docs/protocol.md")).expect("read docs/protocol.md");
    let defined = anchors(&doc).unwrap_or_else(|problems| panic!("{}", problems.join("\n")));
    assert!(defined.len() >= 40, "only {} clause anchors in docs/protocol.md", defined.len());
    let cited = cited(&root);
    assert!(cited.len() >= 40, "only {} distinct clauses cited: is the scanner broken?", cited.len());
    let missing: Vec<String> = cited
        .iter()
        .filter(|(clause, _)| !defined.contains(clause))
        .map(|(clause, places)| format!("N{clause}, cited at {}", places.join(", ")))
        .collect();
    assert!(
        missing.is_empty(),
        "clauses cited but not written in docs/protocol.md (add `<a id=\"nNN\"></a>` and \
         `### NNN — title` under \"Protocol clauses\", or fix the citation):\n{}",
        missing.join("\n")
    );
}

#[test]
fn citations_are_read_in_every_form_in_use() {
    let set = |v: &[u32]| v.iter().copied().collect::<BTreeSet<u32>>();
    assert_eq!(citations("Durable delivery (N24–N26, N37): logged"), set(&[24, 25, 26, 37]));
    assert_eq!(citations("golden (N13, N19, N24-N26) ---"), set(&[13, 19, 24, 25, 26]));
    assert_eq!(citations("anything N3/N31 call `invalid_frame`"), set(&[3, 31]));
    assert_eq!(citations("\"N33: base + every key\""), set(&[33]));
    assert_eq!(citations("N15's 1 s; the N46–48 span"), set(&[15, 46, 47, 48]));
    assert_eq!(citations("[N24](#n24)–[N26](#n26)"), set(&[24, 26]));
    // Not citations: part of a word, too many digits, no digits.
    assert_eq!(citations("FN12 N_12 N1234 N-limits N 12 x86N1 SKUA_N3"), set(&[]));
}

#[test]
fn identifiers_in_rust_code_are_not_citations() {
    let src = "const N12: u8 = 1; // N13\nlet s = \"N14 \\\" N15\"; let q = '\"'; let t = \"N16\";\n\
               fn f<'a>(x: &'a str) -> &'a str { x } /* N17 /* N18 */ N19 */ let N20 = r#\"N21 \"quoted\" \"#;\n\
               let b = br\"N22\"; let e = '\\''; struct N23;";
    let prose = rust_prose(src);
    assert_eq!(prose.lines().count(), src.lines().count(), "newlines are kept");
    let found: BTreeSet<u32> = prose.lines().flat_map(citations).collect();
    assert_eq!(found, [13, 14, 15, 16, 17, 18, 19, 21, 22].into_iter().collect());
}

#[test]
fn python_lint_codes_are_not_citations() {
    assert!(citations(without_noqa("    def do_POST(self):  # noqa: N802 - http.server's naming")).is_empty());
    assert_eq!(citations(without_noqa("    \"\"\"N16: the publishing actor never\"\"\"")), [16].into());
}

#[test]
fn an_anchor_needs_its_heading() {
    assert_eq!(anchors("<a id=\"n1\"></a>\n### N1 — Frames\n"), Ok([1].into()));
    assert!(anchors("<a id=\"n1\"></a>\n### N2 — Frames\n").is_err());
    assert!(anchors("<a id=\"n1\"></a>\n### N1 — a\n<a id=\"n1\"></a>\n### N1 — b\n").is_err());
    assert!(anchors("<a id=\"nx\"></a>\n").is_err());
}
