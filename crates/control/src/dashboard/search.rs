//! The search of the list pages (projects, apps, rooms, actors, grants, lobbies, scopes, API
//! keys): one labelled GET box (`?q=`) keeping the page's other parameters, a case-insensitive
//! substring match on the fields each page names, and the "no match" line. A term longer than
//! `dashboard_search_max_chars` is refused 400 with the box to shorten it.

use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::Response;

use super::html::{self, esc, q};
use super::{Authed, Dashboard};

/// A list page's search term (`?q=`), trimmed; empty: no search, every row shown.
#[derive(Debug, Clone, Default)]
pub(crate) struct Search {
    term: String,
    folded: String,
}

impl Search {
    /// The term of the request's `?q=`. A term of more than `max` characters is refused with
    /// a page saying so (HTTP 400), titled `title` with `current` marked in the navigation,
    /// whose box keeps `keep` and holds the term cut to `max`.
    pub(crate) fn of(
        d: &Dashboard,
        a: &Authed,
        path: &str,
        title: &str,
        current: &str,
        keep: &[(&str, &str)],
    ) -> Result<Self, Box<Response>> {
        let max = d.config.search_max_chars;
        let term = a.query.get("q");
        let chars = term.chars().count();
        if chars > max {
            let cut = Self::new(&term.chars().take(max).collect::<String>());
            let msg = format!("Search term too long: {chars} characters, at most {max}. Shorten it and search again.");
            let mut body = cut.form(path, title, "id, slug or name", keep, max);
            let _ = write!(body, "<p><a href=\"{}\">Show all</a></p>", esc(&cut.without_term(path, keep)));
            return Err(Box::new(html::respond(
                StatusCode::BAD_REQUEST,
                html::page(title, current, &a.csrf, Some(html::Notice::Error(&msg)), &body),
            )));
        }
        Ok(Self::new(term))
    }

    fn new(term: &str) -> Self {
        let term = term.trim().to_owned();
        Self { folded: term.to_lowercase(), term }
    }

    /// Whether a term was given.
    pub(crate) fn is_active(&self) -> bool {
        !self.term.is_empty()
    }

    /// Whether one of `fields` contains the term, ignoring case; always without a term.
    pub(crate) fn matches<'a>(&self, fields: impl IntoIterator<Item = &'a str>) -> bool {
        !self.is_active() || fields.into_iter().any(|f| f.to_lowercase().contains(&self.folded))
    }

    /// The link to `path` with `keep` and without the term.
    fn without_term(&self, path: &str, keep: &[(&str, &str)]) -> String {
        let query: Vec<String> =
            keep.iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| format!("{k}={}", q(v))).collect();
        if query.is_empty() { path.to_owned() } else { format!("{path}?{}", query.join("&")) }
    }

    /// The query string (`&q=…`, or nothing) that keeps the term in a link such as "next page".
    pub(crate) fn link_param(&self) -> String {
        if self.is_active() { format!("&q={}", q(&self.term)) } else { String::new() }
    }

    /// The search box: a GET form to `path` with `keep` (the selected project, app, room) as
    /// hidden fields, the term escaped in the box, a "Clear" link when searching.
    /// `fields` names what is searched, for the box's hint.
    pub(crate) fn form(&self, path: &str, what: &str, fields: &str, keep: &[(&str, &str)], max: usize) -> String {
        let mut f = format!("<form method=\"get\" action=\"{}\" class=\"search\" role=\"search\">", esc(path));
        for (k, v) in keep.iter().filter(|(_, v)| !v.is_empty()) {
            let _ = write!(f, "<input type=\"hidden\" name=\"{}\" value=\"{}\">", esc(k), esc(v));
        }
        let _ = write!(
            f,
            "<div class=\"field\"><label for=\"q\">Search {w}</label><input type=\"search\" id=\"q\" name=\"q\" \
             value=\"{}\" maxlength=\"{max}\" aria-describedby=\"q-hint\"><small id=\"q-hint\">part of its {}; any case</small>\
             </div><button type=\"submit\">Search</button>",
            esc(&self.term),
            esc(fields),
            w = esc(what),
        );
        if self.is_active() {
            let _ = write!(f, " <a href=\"{}\">Clear</a>", esc(&self.without_term(path, keep)));
        }
        f.push_str("</form>");
        f
    }

    /// The table of the rows that matched (`rows` is already filtered): with a term, its
    /// caption says so and no row gives the "no match" line instead of `empty`.
    pub(crate) fn table(&self, caption: &str, head: &[&str], rows: &[Vec<String>], empty: &str) -> String {
        if !self.is_active() {
            return html::table(caption, head, rows, empty);
        }
        if rows.is_empty() {
            return format!(
                "<p class=\"empty\" role=\"status\" id=\"no-match\">No match for “{}” in {}.</p>",
                esc(&self.term),
                esc(caption)
            );
        }
        html::table(&format!("{caption} matching “{}”", self.term), head, rows, empty)
    }
}

#[cfg(test)]
mod tests {
    use super::Search;

    #[test]
    fn matches_any_field_ignoring_case() {
        let s = Search::new("  ALIce ");
        assert_eq!(s.term, "ALIce");
        assert!(s.matches(["bob", "Alice Smith"]));
        assert!(s.matches(["xaliCEx"]));
        assert!(!s.matches(["bob", "ali ce"]));
        assert!(!s.matches([]));
        let none = Search::new("");
        assert!(!none.is_active());
        assert!(none.matches([]), "no term: every row");
        assert!(Search::new("ÉTÉ").matches(["un été"]), "not only ASCII");
    }

    #[test]
    fn the_box_escapes_the_term_and_keeps_the_selection() {
        let s = Search::new("<b>\"x\"&");
        let f =
            s.form("/admin/rooms", "rooms", "slug or name", &[("project", "p1"), ("app", "a&b"), ("room", "")], 200);
        assert!(f.contains("value=\"&lt;b&gt;&quot;x&quot;&amp;\""), "{f}");
        assert!(!f.contains("<b>"), "{f}");
        assert!(f.contains("<input type=\"hidden\" name=\"project\" value=\"p1\">"), "{f}");
        assert!(f.contains("<input type=\"hidden\" name=\"app\" value=\"a&amp;b\">"), "{f}");
        assert!(!f.contains("name=\"room\""), "an empty selection is not kept: {f}");
        assert!(f.contains("<label for=\"q\">Search rooms</label>") && f.contains("maxlength=\"200\""), "{f}");
        assert!(f.contains(">part of its slug or name; any case</small>"), "{f}");
        assert!(f.contains("href=\"/admin/rooms?project=p1&amp;app=a%26b\">Clear</a>"), "{f}");
        assert_eq!(s.link_param(), "&q=%3Cb%3E%22x%22%26");
        let t = s.table("Rooms", &["Slug"], &[], "No rooms.");
        assert!(
            t.contains("No match for “&lt;b&gt;&quot;x&quot;&amp;” in Rooms.") && t.contains("role=\"status\""),
            "{t}"
        );
        let t = s.table("Rooms", &["Slug"], &[vec!["r1".into()]], "No rooms.");
        assert!(t.contains("<caption>Rooms matching “&lt;b&gt;"), "{t}");
    }
}
