//! How a crate declares the settings it owns: [`settings!`](crate::settings!) writes one
//! field per setting (its doc comment, its flag and `SKUA_<NAME>` variable, its compiled-in
//! default) and derives the rest. The server composes every crate's settings into `skua
//! serve`'s flags, environment and TOML keys; `config/default.toml` and `docs/settings.md` are
//! generated from these declarations and a test keeps them in step.
//!
//! Each declared struct holds one layer of settings (defaults, a config file, the environment
//! and flags), every field an `Option`: `None` leaves the value of the layer below.
//!
//! Next to each declaration, the owning crate checks its settings into the typed
//! configuration it runs with (one line per setting, with the rules of [`check`]); that typed
//! configuration's `Default` is the check of the declared defaults, so a default is written
//! once, in the declaration.

pub mod check;

pub use check::SettingError;

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

/// A setting's value made from the default written in its declaration: a string literal for
/// a `String`, a number of the field's own type, `Vec::new()`.
pub trait SettingValue<D> {
    /// The value of default `d`.
    fn from_default(d: D) -> Self;
}

impl SettingValue<&str> for String {
    fn from_default(d: &str) -> Self {
        d.to_owned()
    }
}

impl SettingValue<&str> for std::path::PathBuf {
    fn from_default(d: &str) -> Self {
        d.into()
    }
}

/// Defaults of these types are written as values of the type itself (so that a number
/// literal takes the field's type).
macro_rules! same_type_defaults {
    ($($t:ty),*) => {
        $(impl SettingValue<$t> for $t {
            fn from_default(d: $t) -> Self {
                d
            }
        })*
    };
}

same_type_defaults!(bool, u16, u32, u64, usize, String, Vec<String>);

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
/// A field's type is a name with at most one type argument (`u32`, `String`, `PathBuf`,
/// `Vec<String>`) so that `clap` sees through it. Each field becomes an `Option<T>` with `clap` (the `#[arg]` given) and `serde` derives;
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
                $fvis:vis $field:ident : $ty:ident $(<$targ:ident>)? $(= $default:expr)?
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
                $fvis $field: Option<$ty $(<$targ>)?>,
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
                Self { $($field: $crate::__setting_default!([$ty $(<$targ>)?] $($default)?),)* }
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
    ([$($ty:tt)+]) => {
        ::std::option::Option::None
    };
    ([$($ty:tt)+] $default:expr) => {
        ::std::option::Option::Some(<$($ty)+ as $crate::settings::SettingValue<_>>::from_default($default))
    };
}

/// `(key, value)` of the setting `$field` of the settings struct `$s`, as the rules of
/// [`check`](crate::settings::check) take it: an error then names exactly the key read.
#[macro_export]
macro_rules! setting {
    ($s:expr, $field:ident) => {
        (stringify!($field), $s.$field.as_ref())
    };
}
