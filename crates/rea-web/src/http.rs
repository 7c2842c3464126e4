//! The little HTTP/1.1 the console needs, bounded: one request per
//! connection (`Connection: close`), a head of at most [`MAX_HEAD`] bytes
//! read within [`HEAD_TIMEOUT`], a form body of at most [`MAX_BODY`] bytes,
//! no chunked bodies, no upgrades. Anything else is refused before it
//! reaches a page.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Request line and headers together; a browser sends well under 2 KiB.
pub(crate) const MAX_HEAD: usize = 16 * 1024;
/// A POST's form (a CSRF token and a few fields).
pub(crate) const MAX_BODY: usize = 16 * 1024;
/// The whole head and body must have come by then: a slow client cannot
/// hold a slot.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// A write that makes no progress for this long ends the connection.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// A parsed request.
#[derive(Debug, Default)]
pub(crate) struct Request {
    pub(crate) method: String,
    /// The path, percent-decoded segment by segment later.
    pub(crate) path: String,
    pub(crate) query: String,
    /// Names in lower case, in arrival order.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Request {
    /// The value of a header that must appear at most once; `Err` when it
    /// appears twice (a smuggling attempt or a confused proxy).
    pub(crate) fn one(&self, name: &str) -> Result<Option<&str>, ()> {
        let mut found = None;
        for (n, v) in &self.headers {
            if n == name {
                if found.is_some() {
                    return Err(());
                }
                found = Some(v.as_str());
            }
        }
        Ok(found)
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.one(name).ok().flatten()
    }

    /// A cookie's value.
    pub(crate) fn cookie(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == "cookie")
            .flat_map(|(_, v)| v.split(';'))
            .filter_map(|c| c.trim().split_once('='))
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
    }

    /// The query string's pairs, decoded.
    pub(crate) fn params(&self) -> Vec<(String, String)> {
        form_pairs(self.query.as_bytes())
    }

    /// The form body's pairs, decoded.
    pub(crate) fn form(&self) -> Vec<(String, String)> {
        form_pairs(&self.body)
    }
}

/// Why a request was not read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The client went away or timed out: nothing to answer.
    Gone,
    /// An answer is owed: status and a short reason.
    Bad(u16, &'static str),
}

/// Reads one request: the head within [`HEAD_TIMEOUT`], then its body.
pub(crate) async fn read_request<S: AsyncRead + Unpin>(s: &mut S) -> Result<Request, ReadError> {
    match tokio::time::timeout(HEAD_TIMEOUT, read_inner(s)).await {
        Ok(r) => r,
        Err(_) => Err(ReadError::Gone),
    }
}

async fn read_inner<S: AsyncRead + Unpin>(s: &mut S) -> Result<Request, ReadError> {
    let mut buf = Vec::with_capacity(2048);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_HEAD {
            return Err(ReadError::Bad(431, "request head too large"));
        }
        let n = s.read(&mut chunk).await.map_err(|_| ReadError::Gone)?;
        if n == 0 {
            return Err(ReadError::Gone);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    if head_end > MAX_HEAD {
        return Err(ReadError::Bad(431, "request head too large"));
    }
    let head = std::str::from_utf8(&buf[..head_end])
        .map_err(|_| ReadError::Bad(400, "the request head is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let first = lines.next().unwrap_or("");
    let mut parts = first.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ReadError::Bad(400, "malformed request line"));
    };
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(ReadError::Bad(505, "HTTP/1.x only"));
    }
    if !target.starts_with('/') {
        return Err(ReadError::Bad(400, "the request target must be a path"));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut req = Request {
        method: method.to_string(),
        path: path.to_string(),
        query: query.to_string(),
        ..Request::default()
    };
    for l in lines {
        if l.starts_with([' ', '\t']) {
            return Err(ReadError::Bad(400, "folded headers are not accepted"));
        }
        let Some((name, value)) = l.split_once(':') else {
            return Err(ReadError::Bad(400, "malformed header"));
        };
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ReadError::Bad(400, "malformed header name"));
        }
        req.headers
            .push((name.to_ascii_lowercase(), value.trim().to_string()));
        if req.headers.len() > 100 {
            return Err(ReadError::Bad(431, "too many headers"));
        }
    }
    if req
        .one("transfer-encoding")
        .map_err(|_| ReadError::Bad(400, "twice"))?
        .is_some()
    {
        return Err(ReadError::Bad(411, "send a Content-Length, not chunks"));
    }
    let length = match req.one("content-length") {
        Err(()) => return Err(ReadError::Bad(400, "two Content-Lengths")),
        Ok(None) => 0,
        Ok(Some(v)) => v
            .parse::<usize>()
            .map_err(|_| ReadError::Bad(400, "malformed Content-Length"))?,
    };
    if length > MAX_BODY {
        return Err(ReadError::Bad(413, "request body too large"));
    }
    let mut body = buf.split_off(head_end + 4);
    if body.len() > length {
        body.truncate(length);
    }
    while body.len() < length {
        let want = (length - body.len()).min(chunk.len());
        let n = s
            .read(&mut chunk[..want])
            .await
            .map_err(|_| ReadError::Gone)?;
        if n == 0 {
            return Err(ReadError::Gone);
        }
        body.extend_from_slice(&chunk[..n]);
    }
    req.body = body;
    Ok(req)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `a=1&b=x+y` decoded (`+` is a space, `%XX` a byte; invalid UTF-8 is
/// replaced).
pub(crate) fn form_pairs(s: &[u8]) -> Vec<(String, String)> {
    s.split(|&b| b == b'&')
        .filter(|p| !p.is_empty())
        .take(64)
        .map(|p| {
            let (k, v) = match p.iter().position(|&b| b == b'=') {
                Some(i) => (&p[..i], &p[i + 1..]),
                None => (p, &b""[..]),
            };
            (decode(k, true), decode(v, true))
        })
        .collect()
}

/// Percent-decodes (and with `plus`, `+` as a space).
pub(crate) fn decode(s: &[u8], plus: bool) -> String {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'+' if plus => out.push(b' '),
            b'%' if i + 2 < s.len() => {
                let hex = |b: u8| (b as char).to_digit(16);
                match (hex(s[i + 1]), hex(s[i + 2])) {
                    (Some(a), Some(b)) => {
                        out.push((a * 16 + b) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Percent-encodes a path segment or a query value.
pub(crate) fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A path (and query) made safe for a `Location` header: anything but
/// printable ASCII is percent-encoded, so no header can be smuggled in.
pub(crate) fn encode_path(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_graphic() {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// An answer.
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) content_type: &'static str,
    pub(crate) headers: Vec<(&'static str, String)>,
    pub(crate) body: Vec<u8>,
}

impl Response {
    pub(crate) fn html(status: u16, body: String) -> Response {
        Response {
            status,
            content_type: "text/html; charset=utf-8",
            headers: Vec::new(),
            body: body.into_bytes(),
        }
    }

    pub(crate) fn text(status: u16, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            headers: Vec::new(),
            body: body.into().into_bytes(),
        }
    }

    pub(crate) fn redirect(to: String) -> Response {
        let mut r = Response::text(303, "see other");
        r.headers.push(("Location", to));
        r
    }
}

pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        303 => "See Other",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        411 => "Length Required",
        413 => "Payload Too Large",
        421 => "Misdirected Request",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    }
}

/// What every answer but an embedded asset carries: nothing cached.
pub(crate) const NO_STORE: &str = "Cache-Control: no-store\r\n";

/// The headers every answer carries: no framing, no sniffing, scripts
/// and styles from this origin only (the pages have no inline script), and
/// a referrer that keeps `Origin` on same-origin POSTs.
pub(crate) const SECURITY_HEADERS: &str = "X-Content-Type-Options: nosniff\r\n\
X-Frame-Options: DENY\r\n\
Referrer-Policy: same-origin\r\n\
Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'\r\n";

/// Writes an answer and closes. It is not cached unless it says how
/// (an embedded asset, whose address names its content).
pub(crate) async fn write_response<S: AsyncWrite + Unpin>(s: &mut S, r: &Response) {
    let cache = if r.headers.iter().any(|(n, _)| *n == "Cache-Control") {
        ""
    } else {
        NO_STORE
    };
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n{cache}{SECURITY_HEADERS}",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len()
    );
    for (n, v) in &r.headers {
        head.push_str(n);
        head.push_str(": ");
        head.push_str(v);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    let write = async {
        s.write_all(head.as_bytes()).await?;
        s.write_all(&r.body).await?;
        s.flush().await
    };
    let _ = tokio::time::timeout(WRITE_TIMEOUT, write).await;
}

/// Escapes text for HTML (element content and quoted attributes).
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_is_read_and_bounded() {
        let raw = b"POST /job/a%2Fb/trigger?x=1 HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10\r\nCookie: a=1; rea_session=zz\r\n\r\ncsrf=t+%41";
        let req = read_request(&mut &raw[..]).await.unwrap();
        assert_eq!(req.method, "POST");
        assert_eq!(req.path, "/job/a%2Fb/trigger");
        assert_eq!(req.header("host"), Some("localhost"));
        assert_eq!(req.cookie("rea_session"), Some("zz"));
        assert_eq!(req.form(), vec![("csrf".to_string(), "t A".to_string())]);
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD));
        assert!(matches!(
            read_request(&mut big.as_bytes()).await,
            Err(ReadError::Bad(431, _))
        ));
        let two = b"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n";
        assert!(matches!(
            read_request(&mut &two[..]).await,
            Err(ReadError::Bad(400, _))
        ));
        let chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert!(matches!(
            read_request(&mut &chunked[..]).await,
            Err(ReadError::Bad(411, _))
        ));
    }

    #[test]
    fn decoding_never_panics() {
        assert_eq!(decode(b"%", false), "%");
        assert_eq!(decode(b"%4", false), "%4");
        assert_eq!(decode(b"%41", false), "A");
        assert_eq!(decode(b"a%zz", false), "a%zz");
        assert_eq!(encode("a/b c"), "a%2Fb%20c");
        assert_eq!(esc("<a href='x'>&"), "&lt;a href=&#39;x&#39;&gt;&amp;");
    }
}
