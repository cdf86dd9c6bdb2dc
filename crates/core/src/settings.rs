//! How a crate declares the settings it owns: [`settings!`](crate::settings!) writes one
//! field per setting (its doc comment, its flag and `SKUA_<NAME>` variable, its compiled-in
//! default) and derives the rest. The server composes every crate's settings into `skua
//! serve`'s flags, environment and TOML keys; `config/default.toml` and `docs/settings.md` are
//! generated from these declarations and a test keeps them in step.
//!
//! Each declared struct holds one layer of settings (defaults, a config file, the environment
//! and flags), every field an `Option`: `None` leaves the value of the layer below.

/// One setting's key and documentation, as declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettingDoc {
    /// The key (the field's name): TOML key, `--kebab-case` flag, `SKUA_UPPER_CASE` variable.
    pub key: &'static str,
    /// The doc comment, one line per `///` line (each starting with the space after `///`).
    pub doc: &'static str,
}

impl SettingDoc {
    /// The first paragraph: the one-line help of the flag.
    pub fn summary(&self) -> String {
        let mut out = Vec::new();
        for line in self.doc.lines() {
            if line.trim().is_empty() {
                break;
            }
            out.push(line.trim());
        }
        out.join(" ")
    }

    /// The paragraphs after the first (the longer explanation), as written; empty when the
    /// doc comment is one paragraph.
    pub fn details(&self) -> Vec<&'static str> {
        let mut lines = self.doc.lines().skip_while(|l| !l.trim().is_empty());
        lines.next();
        lines.collect()
    }
}

/// Declares a struct of settings, each field written once:
///
/// ```ignore
/// skua_core::settings! {
///     /// The front door's settings.
///     pub struct FrontSettings {
///         /// Close 4000 after this long without any inbound frame [default 60s].
///         ///
///         /// Longer explanation, for config/default.toml.
///         #[arg(long, env = "SKUA_IDLE_TIMEOUT")]
///         pub idle_timeout: String = "60s",
///         /// A setting without a default (shown commented out in config/default.toml).
///         #[arg(long, env = "SKUA_FIXTURES")]
///         pub fixtures: std::path::PathBuf,
///     }
/// }
/// ```
///
/// Each field becomes an `Option<T>` with `clap` (the `#[arg]` given) and `serde` derives;
/// the struct gets `KEYS`, `DOCS`, `defaults()` (every default given) and `overlay`. The
/// crate using it depends on `clap` and `serde`.
#[macro_export]
macro_rules! settings {
    (
        $(#[$smeta:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[doc = $doc:literal])*
                #[arg($($arg:tt)*)]
                $fvis:vis $field:ident : $ty:ty $(= $default:expr)?
            ),* $(,)?
        }
    ) => {
        $(#[$smeta])*
        #[derive(Debug, Clone, Default, PartialEq, ::clap::Args, ::serde::Deserialize, ::serde::Serialize)]
        $vis struct $name {
            $(
                $(#[doc = $doc])*
                #[arg($($arg)*)]
                #[serde(default, skip_serializing_if = "Option::is_none")]
                $fvis $field: ::std::option::Option<$ty>,
            )*
        }

        impl $name {
            /// Every key, in the order declared.
            pub const KEYS: &'static [&'static str] = &[$(stringify!($field)),*];

            /// Every key with its doc comment, in the order declared.
            pub const DOCS: &'static [$crate::settings::SettingDoc] = &[$(
                $crate::settings::SettingDoc { key: stringify!($field), doc: concat!($($doc, "\n"),*) }
            ),*];

            /// The compiled-in defaults: every setting declared with one.
            pub fn defaults() -> Self {
                Self { $($field: $crate::__setting_default!($($default)?),)* }
            }

            /// Lays `over` on top of `self`: every setting `over` has wins.
            pub fn overlay(&mut self, over: &Self) {
                $(if over.$field.is_some() {
                    self.$field.clone_from(&over.$field);
                })*
            }
        }
    };
}

/// The default of one [`settings!`](crate::settings!) field: `None` when none is declared.
#[doc(hidden)]
#[macro_export]
macro_rules! __setting_default {
    () => {
        ::std::option::Option::None
    };
    ($default:expr) => {
        ::std::option::Option::Some(::std::convert::Into::into($default))
    };
}
