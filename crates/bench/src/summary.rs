//! The result of one run: an ordered list of named figures, printed as a human summary and as
//! one JSON line (the comparison script collects those lines; `report` turns them into tables).

use std::io::Write as _;

use hdrhistogram::Histogram;

use crate::json::{self, Val};

/// Figures of one run, in the order they are printed.
#[derive(Debug, Default, Clone)]
pub struct Summary {
    /// Named values; see `docs/benchmarks.md` for what each means.
    pub fields: Vec<(String, Val)>,
    /// Remarks printed under the summary (and joined into the `notes` field).
    pub notes: Vec<String>,
}

impl Summary {
    /// Sets (or replaces) a figure.
    pub fn set(&mut self, key: &str, v: impl Into<Val>) {
        let v = v.into();
        match self.fields.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = v,
            None => self.fields.push((key.to_owned(), v)),
        }
    }

    /// A figure's value.
    pub fn get(&self, key: &str) -> Option<&Val> {
        self.fields.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// A numeric figure.
    pub fn num(&self, key: &str) -> Option<f64> {
        self.get(key).and_then(Val::num)
    }

    /// Sets `<prefix>_p50_us`, `_p99_us`, `_p999_us` and `_max_us` from `h` (null when empty).
    pub fn latency(&mut self, prefix: &str, h: &Histogram<u64>) {
        let q = |q: f64| (!h.is_empty()).then(|| h.value_at_quantile(q));
        self.set(&format!("{prefix}_p50_us"), q(0.5));
        self.set(&format!("{prefix}_p99_us"), q(0.99));
        self.set(&format!("{prefix}_p999_us"), q(0.999));
        self.set(&format!("{prefix}_max_us"), (!h.is_empty()).then(|| h.max()));
    }

    /// The JSON line.
    pub fn json(&self) -> String {
        let mut f = self.fields.clone();
        f.push(("notes".into(), Val::from(self.notes.join("; "))));
        json::line(&f)
    }

    /// Prints the human summary to stdout, then the JSON line (last, on a line of its own);
    /// also appends the JSON line to `json_out` when given.
    ///
    /// # Errors
    /// Writing `json_out` failed.
    pub fn emit(&self, json_out: Option<&std::path::Path>) -> anyhow::Result<()> {
        let mut out = String::new();
        for (k, v) in &self.fields {
            let shown = match v {
                Val::Str(s) => s.clone(),
                Val::Num(n) if k.ends_with("_us") && *n >= 1000.0 => format!("{n:.0} µs ({:.2} ms)", n / 1000.0),
                Val::Num(n) if n.fract() == 0.0 => format!("{n:.0}"),
                Val::Num(n) => format!("{n:.3}"),
                Val::Bool(b) => b.to_string(),
                Val::Null => "n/a".into(),
            };
            out.push_str(&format!("  {k:<28} {shown}\n"));
        }
        for n in &self.notes {
            out.push_str(&format!("  note: {n}\n"));
        }
        let line = self.json();
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{out}{line}");
        if let Some(path) = json_out {
            let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
            writeln!(f, "{line}")?;
        }
        Ok(())
    }
}
