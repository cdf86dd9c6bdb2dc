//! Property tests (proptest): the decoder never panics and agrees with a model of N3/N31 on
//! random frames, payloads survive byte for byte (N2), filter keys normalise as N12 says, and
//! every encoded server frame is a map with `str` keys that matches the documented shape (N1).

mod decode;
mod filters;
mod server;
mod values;
