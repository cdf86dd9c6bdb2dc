//! Golden fixture files under `tests/fixtures/<kind>/<name>.hex`: lowercase hex, wrapped at 64
//! characters (32 bytes) a line. Whitespace is ignored when reading; anything else that is not a
//! lowercase hex digit is an error, so a hand-edited fixture cannot drift into another format.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// Server frames, written by the encoder in bless mode.
pub const SERVER: &str = "server";
/// Client frames, written by `tests/fixtures/gen_client_fixtures.py` (never blessed from Rust).
pub const CLIENT: &str = "client";

/// Hex digits per fixture line.
const LINE: usize = 64;

/// The folder of one kind of fixture.
pub fn dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("fixtures").join(kind)
}

fn path(kind: &str, name: &str) -> PathBuf {
    dir(kind).join(format!("{name}.hex"))
}

/// Whether `SKUA_BLESS=1` asks us to rewrite the server fixtures instead of comparing.
/// The variable is only read, never set (clippy.toml bans `set_var`).
///
/// # Panics
/// Under `CI=true`: a CI run that blesses would rewrite the fixtures instead of checking them,
/// and pass whatever the encoder does (issue 35).
pub fn blessing() -> bool {
    let bless = std::env::var_os("SKUA_BLESS").is_some_and(|v| v == "1");
    assert!(
        !(bless && std::env::var_os("CI").is_some_and(|v| v == "true")),
        "SKUA_BLESS=1 under CI=true: the golden tests would rewrite their fixtures instead of comparing"
    );
    bless
}

/// Formats bytes the way fixtures are stored.
pub fn to_hex(bytes: &[u8]) -> String {
    let flat: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut out = String::with_capacity(flat.len() + flat.len() / LINE + 1);
    for chunk in flat.as_bytes().chunks(LINE) {
        out.push_str(std::str::from_utf8(chunk).expect("hex is ascii"));
        out.push('\n');
    }
    if out.is_empty() {
        out.push('\n');
    }
    out
}

/// Parses fixture text. Rejects uppercase, odd digit counts and stray characters.
pub fn parse_hex(text: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    if let Some(bad) = digits.iter().find(|b| !matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(format!("not a lowercase hex digit: {:?}", char::from(*bad)));
    }
    if !digits.len().is_multiple_of(2) {
        return Err(format!("odd number of hex digits ({})", digits.len()));
    }
    let nibble = |d: u8| {
        if d.is_ascii_digit() { d - b'0' } else { d - b'a' + 10 }
    };
    Ok(digits.chunks(2).map(|p| (nibble(p[0]) << 4) | nibble(p[1])).collect())
}

/// Reads a fixture, or says why it cannot be read.
pub fn try_read(kind: &str, name: &str) -> Result<Vec<u8>, String> {
    let p = path(kind, name);
    let text = fs::read_to_string(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    parse_hex(&text).map_err(|e| format!("{}: {e}", p.display()))
}

/// Reads a fixture; panics with the path when it is missing or malformed.
pub fn read(kind: &str, name: &str) -> Vec<u8> {
    try_read(kind, name).unwrap_or_else(|e| panic!("{e}"))
}

/// Writes a fixture when its content changed (bless mode).
pub fn write(kind: &str, name: &str, bytes: &[u8]) {
    let p = path(kind, name);
    let text = to_hex(bytes);
    if fs::read_to_string(&p).is_ok_and(|old| old == text) {
        return;
    }
    fs::create_dir_all(dir(kind)).expect("create fixture dir");
    // Write then rename, so a concurrent reader never sees half a file.
    let tmp = p.with_extension("hex.tmp");
    fs::write(&tmp, text).unwrap_or_else(|e| panic!("write {}: {e}", tmp.display()));
    fs::rename(&tmp, &p).unwrap_or_else(|e| panic!("rename to {}: {e}", p.display()));
}

/// Names of the `.hex` files of one kind (`x.data.hex` is `x.data`).
pub fn names_on_disk(kind: &str) -> BTreeSet<String> {
    let d = dir(kind);
    fs::read_dir(&d)
        .unwrap_or_else(|e| panic!("read {}: {e}", d.display()))
        .map(|entry| entry.expect("dir entry").file_name().to_string_lossy().into_owned())
        .filter_map(|f| f.strip_suffix(".hex").map(str::to_owned))
        .collect()
}

#[test]
fn hex_round_trips_and_rejects_other_formats() {
    let bytes: Vec<u8> = (0..=255).collect();
    let text = to_hex(&bytes);
    assert!(text.lines().all(|l| l.len() <= LINE), "wrapped at {LINE}");
    assert_eq!(parse_hex(&text), Ok(bytes));
    assert_eq!(parse_hex("c0 \n 90\n"), Ok(vec![0xc0, 0x90]));
    assert!(parse_hex("C0").is_err(), "uppercase is refused");
    assert!(parse_hex("c").is_err(), "odd digit count is refused");
    assert!(parse_hex("0xc0").is_err(), "prefixes are refused");
}
