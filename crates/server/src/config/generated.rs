//! `config/default.toml` and `docs/settings.md`, rendered from the settings the crates declare
//! ([`Settings::parts`]). Both files are generated: the tests below fail, with a diff, when a
//! file differs from its rendering. Regenerate both with
//!
//! ```text
//! cargo test -p skua-server --lib config::generated::tests::regenerate -- --ignored
//! ```

use serde_json::Value;
use skua_core::settings::SettingDoc;

use super::Settings;

/// The command that writes both generated files.
pub const REGENERATE: &str = "cargo test -p skua-server --lib config::generated::tests::regenerate -- --ignored";

/// One crate's part of [`Settings`].
#[derive(Debug, Clone)]
pub struct Part {
    /// Its struct's name (`EdgeSettings`).
    pub name: &'static str,
    /// Its settings' keys and doc comments, in order.
    pub docs: &'static [SettingDoc],
    /// Its compiled-in defaults, as a JSON object (settings without a default are absent).
    pub defaults: Value,
}

impl Part {
    /// The default of `key` as a TOML value (`"60s"`, `50`, `[]`), if it has one.
    pub fn default_toml(&self, key: &str) -> Option<String> {
        self.defaults.get(key).map(toml_value)
    }
}

/// A JSON value (strings, numbers, booleans, arrays of them) written as TOML: JSON's string
/// escapes are TOML's.
fn toml_value(v: &Value) -> String {
    match v {
        Value::Array(items) => format!("[{}]", items.iter().map(toml_value).collect::<Vec<_>>().join(", ")),
        other => other.to_string(),
    }
}

/// `summary` without its trailing `[default …]` (the value is written beside it).
fn without_default(summary: &str) -> &str {
    match summary.rfind(" [default") {
        Some(i) => summary[..i].trim_end(),
        None => summary,
    }
}

/// The text of `config/default.toml`.
pub fn default_toml() -> String {
    let mut out = String::from(
        "# Skua's compiled-in defaults. Every setting of `skua serve`; each is also a flag\n\
         # (`--idle-timeout 30s`) and an environment variable (`SKUA_IDLE_TIMEOUT=30s`).\n\
         # Precedence, lowest first: this file, `--config FILE`, environment, flags.\n\
         # Durations are written 500ms, 5s, 10m, 2h, 1d. Unknown keys stop the server (exit 2).\n\
         #\n\
         # Generated from the settings the crates declare (one field each, with its doc comment and\n\
         # default; the part's struct is named in each heading): edit those, then run\n",
    );
    out.push_str(&format!("# {REGENERATE}\n"));
    for part in Settings::parts() {
        out.push_str(&format!("\n# ---- {} ----\n\n", part.name));
        for doc in part.docs {
            let details = doc.details();
            if details.is_empty() {
                out.push_str(&format!("# {}\n", without_default(&doc.summary())));
            } else {
                for line in details {
                    out.push_str(&format!("#{}\n", line.trim_end()));
                }
            }
            match part.default_toml(doc.key) {
                Some(v) => out.push_str(&format!("{} = {v}\n", doc.key)),
                None => out.push_str(&format!("# {} = \"\"\n", doc.key)),
            }
        }
    }
    out
}

/// The text of `docs/settings.md`.
pub fn settings_md() -> String {
    let mut out = String::from(
        "# Settings\n\n\
         Every setting of `skua serve`, as the crates declare it. Each is a key of the `--config` TOML\n\
         file, a flag and a `SKUA_<NAME>` environment variable; precedence, lowest first: the\n\
         compiled-in defaults ([config/default.toml](../config/default.toml), which explains each one\n\
         at length), the `--config` file, the environment, flags. Durations are written `500ms`, `5s`,\n\
         `10m`, `2h`, `1d`. Unknown keys or flags stop the process with exit status 2; invalid values\n\
         with 64, naming the key. `skua serve --print-config` shows the effective configuration.\n\n\
         This file and `config/default.toml` are generated from the settings structs (one field per\n\
         setting: doc comment, flag, variable, default); a test fails when they differ. To add a\n\
         setting, add its field to the struct of the crate that uses it (named in each heading\n\
         below) and check it into that crate's typed configuration in the one line per setting\n\
         right below the declaration (the typed configuration's default is the declared one), then\n\
         run:\n\n",
    );
    out.push_str(&format!("```sh\n{REGENERATE}\n```\n"));
    for part in Settings::parts() {
        out.push_str(&format!(
            "\n## `{}`\n\n| key | flag / variable | default | what |\n|---|---|---|---|\n",
            part.name
        ));
        for doc in part.docs {
            let default = part.default_toml(doc.key).map_or_else(|| "none".to_owned(), |v| format!("`{v}`"));
            out.push_str(&format!(
                "| `{key}` | `--{flag}`, `SKUA_{env}` | {default} | {what} |\n",
                key = doc.key,
                flag = doc.key.replace('_', "-"),
                env = doc.key.to_ascii_uppercase(),
                what = without_default(&doc.summary()).replace('|', "\\|"),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The repository's root.
    fn root() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    /// The first lines where `file` and `want` differ, for the failure message.
    fn diff(file: &str, want: &str) -> String {
        let (a, b): (Vec<&str>, Vec<&str>) = (file.lines().collect(), want.lines().collect());
        let first = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
        let show = |lines: &[&str]| lines.iter().skip(first).take(8).map(|l| format!("    {l}")).collect::<Vec<_>>();
        format!(
            "first difference at line {}:\n  the file has:\n{}\n  the settings give:\n{}",
            first + 1,
            show(&a).join("\n"),
            show(&b).join("\n")
        )
    }

    fn check(path: &str, want: &str) {
        let file = std::fs::read_to_string(root().join(path)).unwrap_or_default();
        assert!(
            file == want,
            "{path} is not what the settings declare; regenerate it with\n  {REGENERATE}\n{}",
            diff(&file, want)
        );
    }

    #[test]
    fn default_toml_is_generated_from_the_settings() {
        check("config/default.toml", &default_toml());
        assert_eq!(super::super::DEFAULT_TOML, default_toml(), "the compiled-in copy is the file's");
    }

    #[test]
    fn docs_settings_md_is_generated_from_the_settings() {
        check("docs/settings.md", &settings_md());
    }

    /// Writes both generated files (run by hand, see [`REGENERATE`]).
    #[test]
    #[ignore = "writes config/default.toml and docs/settings.md"]
    fn regenerate() {
        std::fs::write(root().join("config/default.toml"), default_toml()).unwrap();
        std::fs::write(root().join("docs/settings.md"), settings_md()).unwrap();
    }

    /// The file read back gives the defaults themselves.
    #[test]
    fn default_toml_reads_back_as_the_defaults() {
        let read = Settings::from_toml(&default_toml()).unwrap();
        assert_eq!(read, Settings::defaults());
    }

    /// The README's table of common flags: every flag it names is a setting (or one of
    /// `serve`'s own flags), and every default it gives in backticks is the declared one.
    #[test]
    fn readme_flags_and_defaults_are_the_declared_ones() {
        let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
        let defaults: std::collections::HashMap<&str, String> = Settings::parts()
            .iter()
            .flat_map(|p| p.docs.iter().map(move |d| (d.key, p.default_toml(d.key).unwrap_or_default())))
            .map(|(k, v)| (k, v.trim_matches('"').to_owned()))
            .collect();
        let own = ["dev", "config", "print-config", "tls-self-signed"];
        let (mut wrong, mut compared) = (Vec::new(), 0);
        for row in readme.lines().filter(|l| l.starts_with("| `--")) {
            let cells: Vec<&str> = row.trim_matches('|').split(" | ").map(str::trim).collect();
            let [flags_cell, default_cell, ..] = cells.as_slice() else { continue };
            let flags: Vec<&str> = flags_cell.split("`--").skip(1).filter_map(|f| f.split([' ', '`']).next()).collect();
            // The defaults, one per flag, separated by ", " outside parentheses.
            let mut items = Vec::new();
            let (mut depth, mut start) = (0, 0);
            for (i, ch) in default_cell.char_indices() {
                match ch {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    ',' if depth == 0 => {
                        items.push(default_cell[start..i].trim());
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            items.push(default_cell[start..].trim());
            for (n, flag) in flags.iter().enumerate() {
                if own.contains(flag) {
                    continue;
                }
                let key = flag.replace('-', "_");
                let Some(declared) = defaults.get(key.as_str()) else {
                    wrong.push(format!("README names --{flag}, which is no setting"));
                    continue;
                };
                let item = if items.len() == flags.len() { items[n] } else { items[0] };
                if let Some(said) = item.strip_prefix('`').and_then(|v| v.split('`').next()) {
                    if said != declared {
                        wrong.push(format!("README gives --{flag} the default {said}, declared {declared}"));
                    }
                    compared += 1;
                }
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        assert!(compared > 60, "only {compared} README defaults compared: did the table's layout change?");
    }

    /// The settings tables of docs/ (a row per key: `` | `key` | `default` | … ``) give the
    /// declared defaults. docs/security.md's tables, which group keys, have their own check
    /// (`config::tests::security_md_lists_every_budget_and_rate_limit_with_its_default`).
    #[test]
    fn docs_tables_give_the_declared_defaults() {
        let defaults: std::collections::HashMap<&str, String> = Settings::parts()
            .iter()
            .flat_map(|p| p.docs.iter().map(move |d| (d.key, p.default_toml(d.key).unwrap_or_default())))
            .map(|(k, v)| (k, v.trim_matches('"').to_owned()))
            .collect();
        let (mut wrong, mut compared) = (Vec::new(), 0);
        for entry in std::fs::read_dir(root().join("docs")).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !name.ends_with(".md") || name == "settings.md" || name == "security.md" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for row in text.lines().filter(|l| l.starts_with("| `")) {
                let cells: Vec<&str> = row.trim_matches('|').split(" | ").map(str::trim).collect();
                let [key_cell, default_cell, ..] = cells.as_slice() else { continue };
                let Some(key) = key_cell.strip_prefix('`').and_then(|k| k.strip_suffix('`')) else { continue };
                let (Some(declared), Some(said)) =
                    (defaults.get(key), default_cell.strip_prefix('`').and_then(|v| v.split('`').next()))
                else {
                    continue;
                };
                if said.trim_matches('"') != declared {
                    wrong.push(format!("docs/{name}: {key} {said}, declared {declared}"));
                }
                compared += 1;
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        assert!(compared > 20, "only {compared} docs defaults compared");
    }

    /// A help line's `[default X]` names the declared default (or, for an empty one, says so).
    #[test]
    fn every_help_default_is_the_declared_one() {
        let mut wrong = Vec::new();
        let mut compared = 0;
        for part in Settings::parts() {
            for doc in part.docs {
                let summary = doc.summary();
                let Some(said) = summary.rfind("[default ").map(|i| &summary[i + 9..]) else { continue };
                let value = part.default_toml(doc.key).unwrap_or_default();
                let value = value.trim_matches('"');
                let agrees = match value {
                    "" | "[]" => ["empty", "none", "random", "any"].iter().any(|w| said.starts_with(w)),
                    v => said.strip_prefix(v).is_some_and(|rest| rest.starts_with([']', ';', ':', ','])),
                };
                if !agrees {
                    wrong.push(format!("{}: help says [default {said}, declared {value}", doc.key));
                }
                compared += 1;
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        assert!(compared > 140, "only {compared} help defaults compared");
    }
}
