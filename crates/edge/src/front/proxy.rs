//! The PROXY protocol header (HAProxy's, versions 1 and 2) a load balancer sends before the
//! client's bytes, carrying the client's address (`proxy_protocol = true`).
//!
//! The header is read exactly: not one byte of what follows (a TLS ClientHello, an HTTP
//! request) is consumed, so the stream can be handed on as it is. Version 1 is read a byte at
//! a time after its first 15 bytes (at most 107 in all); version 2 by its length field.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tokio::io::{AsyncRead, AsyncReadExt};

/// The version 2 signature.
const V2_SIG: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// Longest version 1 header, CRLF included (spec §2.1).
const V1_MAX: usize = 107;
/// Shortest version 1 header: `PROXY UNKNOWN\r\n`.
const V1_MIN: usize = 15;
/// Longest version 2 address block accepted (addresses plus TLVs; load balancers send well
/// under this). A longer one is refused rather than buffered.
const V2_MAX_LEN: usize = 4096;

/// Why a connection's PROXY header was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProxyHeaderError {
    /// The stream ended or failed before the header did.
    #[error("reading the PROXY header: {0}")]
    Io(#[from] std::io::Error),
    /// The bytes are not a PROXY header.
    #[error("malformed PROXY header: {0}")]
    Malformed(&'static str),
}

/// Reads a PROXY header from `r`: the client's address, or `None` when the proxy sends none
/// (v1 `UNKNOWN`, v2 `LOCAL` health checks, or a family other than TCP over IPv4/IPv6).
///
/// # Cancel safety
/// Not cancel safe: bytes read before cancellation are lost (the caller closes the socket).
pub(crate) async fn read_header<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<SocketAddr>, ProxyHeaderError> {
    let mut head = [0u8; V1_MIN];
    r.read_exact(&mut head).await?;
    if head[..12] == V2_SIG {
        let mut rest = [0u8; 1];
        r.read_exact(&mut rest).await?;
        return read_v2(r, [head[12], head[13], head[14], rest[0]]).await;
    }
    if !head.starts_with(b"PROXY ") {
        return Err(ProxyHeaderError::Malformed("no PROXY signature"));
    }
    let mut line = head.to_vec();
    while !line.ends_with(b"\r\n") {
        if line.len() >= V1_MAX {
            return Err(ProxyHeaderError::Malformed("v1 header longer than 107 bytes"));
        }
        line.push(r.read_u8().await?);
    }
    parse_v1(&line[..line.len() - 2])
}

fn parse_v1(line: &[u8]) -> Result<Option<SocketAddr>, ProxyHeaderError> {
    let bad = ProxyHeaderError::Malformed;
    let line = std::str::from_utf8(line).map_err(|_| bad("v1 header is not ASCII"))?;
    let mut parts = line.split(' ');
    let (_proxy, family) = (parts.next(), parts.next().ok_or(bad("v1 header has no family"))?);
    if family == "UNKNOWN" {
        return Ok(None);
    }
    let fields: Vec<&str> = parts.collect();
    let [src, dst, sport, _dport] = fields[..] else { return Err(bad("v1 header needs 4 address fields")) };
    if line.contains('\r') || line.contains('\n') {
        return Err(bad("v1 header has a stray CR or LF"));
    }
    let src: IpAddr = match family {
        "TCP4" => src.parse::<Ipv4Addr>().map(IpAddr::V4).map_err(|_| bad("v1 source is not IPv4"))?,
        "TCP6" => src.parse::<Ipv6Addr>().map(IpAddr::V6).map_err(|_| bad("v1 source is not IPv6"))?,
        _ => return Err(bad("v1 family is not TCP4, TCP6 or UNKNOWN")),
    };
    if dst.parse::<IpAddr>().is_err() {
        return Err(bad("v1 destination is not an address"));
    }
    let port = sport.parse::<u16>().map_err(|_| bad("v1 source port is not a port"))?;
    Ok(Some(SocketAddr::new(src, port)))
}

async fn read_v2<R: AsyncRead + Unpin>(r: &mut R, fixed: [u8; 4]) -> Result<Option<SocketAddr>, ProxyHeaderError> {
    let bad = ProxyHeaderError::Malformed;
    let [ver_cmd, fam, len_hi, len_lo] = fixed;
    if ver_cmd >> 4 != 2 {
        return Err(bad("v2 version is not 2"));
    }
    let len = usize::from(u16::from_be_bytes([len_hi, len_lo]));
    if len > V2_MAX_LEN {
        return Err(bad("v2 address block too long"));
    }
    let mut block = vec![0u8; len];
    r.read_exact(&mut block).await?;
    match ver_cmd & 0x0f {
        // LOCAL: the proxy's own connection (health checks); the block is ignored.
        0 => return Ok(None),
        1 => {}
        _ => return Err(bad("v2 command is not LOCAL or PROXY")),
    }
    // Only TCP (STREAM) over IPv4 or IPv6 carries an address we use.
    match fam {
        0x11 => {
            let b: &[u8; 12] = block.get(..12).and_then(|b| b.try_into().ok()).ok_or(bad("v2 IPv4 block too short"))?;
            let ip = Ipv4Addr::new(b[0], b[1], b[2], b[3]);
            Ok(Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be_bytes([b[8], b[9]]))))
        }
        0x21 => {
            let b: &[u8; 36] = block.get(..36).and_then(|b| b.try_into().ok()).ok_or(bad("v2 IPv6 block too short"))?;
            let mut src = [0u8; 16];
            src.copy_from_slice(&b[..16]);
            Ok(Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(src)), u16::from_be_bytes([b[32], b[33]]))))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read(bytes: &[u8]) -> (Result<Option<SocketAddr>, ProxyHeaderError>, Vec<u8>) {
        let mut r = bytes;
        let res = read_header(&mut r).await;
        (res, r.to_vec())
    }

    fn addr(s: &str) -> Option<SocketAddr> {
        Some(s.parse().unwrap())
    }

    #[tokio::test]
    async fn v1_headers_give_the_source_and_leave_the_rest() {
        let (res, rest) = read(b"PROXY TCP4 203.0.113.9 10.0.0.1 51000 8080\r\nGET / HTTP/1.1\r\n").await;
        assert_eq!(res.unwrap(), addr("203.0.113.9:51000"));
        assert_eq!(rest, b"GET / HTTP/1.1\r\n");
        let (res, rest) = read(b"PROXY TCP6 2001:db8::1 2001:db8::2 1 2\r\n\x16\x03").await;
        assert_eq!(res.unwrap(), addr("[2001:db8::1]:1"));
        assert_eq!(rest, b"\x16\x03");
        let (res, rest) = read(b"PROXY UNKNOWN\r\nX").await;
        assert_eq!(res.unwrap(), None);
        assert_eq!(rest, b"X");
        let (res, _) = read(b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n").await;
        assert_eq!(res.unwrap(), None);
    }

    #[tokio::test]
    async fn v1_malformed_headers_are_refused() {
        let long = format!("PROXY TCP4 {}\r\n", "1".repeat(120));
        for bad in [
            &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",
            b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n",
            b"PROXY TCP6 1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1.2.3.4 5.6.7.8 99999 2\r\n",
            b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n",
            b"PROXY TCP4 1.2.3.4\n5.6.7.8 1 2\r\n",
            long.as_bytes(),
            b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2",
        ] {
            assert!(read(bad).await.0.is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    fn v2(cmd: u8, fam: u8, block: &[u8]) -> Vec<u8> {
        let mut h = V2_SIG.to_vec();
        h.push(0x20 | cmd);
        h.push(fam);
        h.extend_from_slice(&u16::try_from(block.len()).unwrap().to_be_bytes());
        h.extend_from_slice(block);
        h
    }

    #[tokio::test]
    async fn v2_headers_give_the_source_and_leave_the_rest() {
        let mut block = vec![203, 0, 113, 9, 10, 0, 0, 1, 0xc7, 0x38, 0x1f, 0x90];
        block.extend_from_slice(&[0x04, 0, 3, b'a', b'b', b'c']); // a TLV, skipped
        let mut bytes = v2(1, 0x11, &block);
        bytes.extend_from_slice(b"GET");
        let (res, rest) = read(&bytes).await;
        assert_eq!(res.unwrap(), addr("203.0.113.9:51000"));
        assert_eq!(rest, b"GET");

        let mut block = vec![0u8; 36];
        block[0] = 0x20;
        block[1] = 0x01;
        block[15] = 1;
        block[32..34].copy_from_slice(&443u16.to_be_bytes());
        let (res, _) = read(&v2(1, 0x21, &block)).await;
        assert_eq!(res.unwrap(), addr("[2001::1]:443"));

        let (res, rest) = read(&[v2(0, 0x00, &[]), b"x".to_vec()].concat()).await;
        assert_eq!(res.unwrap(), None, "LOCAL");
        assert_eq!(rest, b"x");
        let (res, _) = read(&v2(1, 0x31, &[0u8; 216])).await;
        assert_eq!(res.unwrap(), None, "AF_UNIX carries no address we use");
    }

    #[tokio::test]
    async fn v2_malformed_headers_are_refused() {
        let mut wrong_version = v2(1, 0x11, &[0; 12]);
        wrong_version[12] = 0x11;
        let mut too_long = V2_SIG.to_vec();
        too_long.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
        for bad in [wrong_version, v2(1, 0x11, &[0; 11]), v2(1, 0x21, &[0; 12]), v2(2, 0x11, &[0; 12]), too_long] {
            assert!(read(&bad).await.0.is_err(), "{bad:?}");
        }
        let truncated = &v2(1, 0x11, &[0; 12])[..20];
        assert!(read(truncated).await.0.is_err());
    }
}
