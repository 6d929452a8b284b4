//! The kubelet's gRPC servers on unix sockets take any client upstream's
//! take. grpc-go dialling a socket path without `WithAuthority` (upstream's
//! sample device plugin, NVIDIA's, many monitoring agents) sends the path as
//! the HTTP/2 `:authority`; h2, under tonic, refuses such a request with
//! PROTOCOL_ERROR (hyperium/h2#487, unmerged), where grpc-go's server takes
//! it. Each connection is read through [`LocalAuthority`]: the header blocks
//! the client sends are decoded (HPACK, with its dynamic table), an
//! `:authority` that is not one becomes `localhost` (what grpc-go itself
//! sends for a `unix:` target), and the block is encoded again for the
//! server; every other frame passes as it is, and the server's replies are
//! not touched.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, BytesMut};
use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnixListenerStream;

/// The client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The frame size every HTTP/2 peer accepts (SETTINGS_MAX_FRAME_SIZE's
/// initial value): re-encoded blocks are split to it.
const MAX_FRAME: usize = 16_384;
/// The most a header block's fragments may hold here: past it, the rest
/// passes untouched and h2's own limits apply (a client cannot make this
/// buffer grow without bound, CONTINUATION after CONTINUATION).
const MAX_BLOCK: usize = 1 << 20;
/// The authority a unix socket's request is given.
const LOCALHOST: &[u8] = b"localhost";

/// The connections `listener` accepts, each read through
/// [`LocalAuthority`]: what `serve_with_incoming` takes.
pub fn incoming(
    listener: UnixListener,
) -> impl Stream<Item = io::Result<LocalAuthority<UnixStream>>> {
    UnixListenerStream::new(listener).map(|c| c.map(LocalAuthority::new))
}

/// A header block being received: its stream, its HEADERS frame's flags
/// and priority fields, and its fragments so far.
struct Block {
    stream: u32,
    flags: u8,
    priority: Option<[u8; 5]>,
    fragments: Vec<u8>,
}

/// A server connection whose client header blocks are given a valid
/// `:authority`.
pub struct LocalAuthority<S> {
    inner: S,
    /// Read from the client, not yet looked at.
    raw: BytesMut,
    /// Ready for the server.
    out: BytesMut,
    /// The preface is still to come (then frames follow).
    preface: bool,
    /// Not HTTP/2 as expected, or a block that could not be decoded: the
    /// rest passes untouched (h2 then says what is wrong).
    passthrough: bool,
    block: Option<Block>,
    decoder: loona_hpack::Decoder<'static>,
    encoder: loona_hpack::Encoder<'static>,
}

impl<S> LocalAuthority<S> {
    pub fn new(inner: S) -> Self {
        LocalAuthority {
            inner,
            raw: BytesMut::new(),
            out: BytesMut::new(),
            preface: true,
            passthrough: false,
            block: None,
            decoder: loona_hpack::Decoder::new(),
            encoder: loona_hpack::Encoder::new(),
        }
    }

    /// Move what `raw` holds in full (the preface, whole frames) to `out`,
    /// header blocks re-encoded.
    fn process(&mut self) {
        if self.passthrough {
            self.out.unsplit(self.raw.split());
            return;
        }
        if self.preface {
            let n = self.raw.len().min(PREFACE.len());
            if self.raw[..n] != PREFACE[..n] {
                self.passthrough = true;
                return self.process();
            }
            if n < PREFACE.len() {
                return;
            }
            self.out.unsplit(self.raw.split_to(PREFACE.len()));
            self.preface = false;
        }
        while self.raw.len() >= FRAME_HEADER {
            let len = (usize::from(self.raw[0]) << 16)
                | (usize::from(self.raw[1]) << 8)
                | usize::from(self.raw[2]);
            if len > MAX_FRAME {
                // Larger than h2 takes: it refuses the frame itself, and
                // nothing waits here for it to arrive whole.
                self.passthrough = true;
                return self.process();
            }
            if self.raw.len() < FRAME_HEADER + len {
                return;
            }
            let kind = self.raw[3];
            let flags = self.raw[4];
            let stream = u32::from_be_bytes([self.raw[5], self.raw[6], self.raw[7], self.raw[8]])
                & 0x7fff_ffff;
            match kind {
                HEADERS | CONTINUATION => {
                    let frame = self.raw.split_to(FRAME_HEADER + len);
                    if !self.header_frame(kind, flags, stream, &frame[FRAME_HEADER..]) {
                        // Not a block this can rewrite: as it came.
                        self.passthrough = true;
                        self.out.unsplit(frame);
                        return self.process();
                    }
                }
                _ => {
                    let frame = self.raw.split_to(FRAME_HEADER + len);
                    self.out.unsplit(frame);
                }
            }
        }
    }

    /// Take a HEADERS or CONTINUATION frame's payload; once the block is
    /// whole, write it out re-encoded. False when it cannot be (a block out
    /// of order, a malformed frame or block).
    fn header_frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) -> bool {
        let mut p = payload;
        if kind == HEADERS {
            if self.block.is_some() {
                return false;
            }
            let mut pad = 0;
            if flags & PADDED != 0 {
                let Some((&n, rest)) = p.split_first() else {
                    return false;
                };
                pad = usize::from(n);
                p = rest;
            }
            let priority = if flags & PRIORITY != 0 {
                let Some((head, rest)) = p.split_first_chunk::<5>() else {
                    return false;
                };
                p = rest;
                Some(*head)
            } else {
                None
            };
            let Some(end) = p.len().checked_sub(pad) else {
                return false;
            };
            self.block = Some(Block {
                stream,
                flags,
                priority,
                fragments: p[..end].to_vec(),
            });
        } else {
            match self.block.as_mut() {
                Some(b) if b.stream == stream && b.fragments.len() + p.len() <= MAX_BLOCK => {
                    b.fragments.extend_from_slice(p)
                }
                _ => return false,
            }
        }
        if flags & END_HEADERS == 0 {
            return true;
        }
        let Some(block) = self.block.take() else {
            return false;
        };
        let Ok(mut headers) = self.decoder.decode(&block.fragments) else {
            return false;
        };
        for (name, value) in &mut headers {
            if name == b":authority" && !valid_authority(value) {
                *value = LOCALHOST.to_vec();
            }
        }
        let encoded = self
            .encoder
            .encode(headers.iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
        self.write_block(&block, &encoded);
        true
    }

    /// A header block as a HEADERS frame and as many CONTINUATION frames as
    /// it needs.
    fn write_block(&mut self, block: &Block, encoded: &[u8]) {
        let head = block.priority.map(|p| p.to_vec()).unwrap_or_default();
        let first = encoded.len().min(MAX_FRAME - head.len());
        let (now, mut rest) = encoded.split_at(first);
        let mut flags = (block.flags & (END_STREAM | PRIORITY)) | END_HEADERS;
        if !rest.is_empty() {
            flags &= !END_HEADERS;
        }
        self.frame(HEADERS, flags, block.stream, &[&head, now]);
        while !rest.is_empty() {
            let n = rest.len().min(MAX_FRAME);
            let (now, later) = rest.split_at(n);
            rest = later;
            let flags = if rest.is_empty() { END_HEADERS } else { 0 };
            self.frame(CONTINUATION, flags, block.stream, &[now]);
        }
    }

    fn frame(&mut self, kind: u8, flags: u8, stream: u32, parts: &[&[u8]]) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        self.out.put_uint(len as u64, 3);
        self.out.put_u8(kind);
        self.out.put_u8(flags);
        self.out.put_u32(stream);
        for p in parts {
            self.out.put_slice(p);
        }
    }
}

/// Whether `value` is an authority h2 takes.
fn valid_authority(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

impl<S: AsyncRead + Unpin> AsyncRead for LocalAuthority<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = &mut *self;
        loop {
            if !me.out.is_empty() {
                let n = me.out.len().min(buf.remaining());
                buf.put_slice(&me.out[..n]);
                me.out.advance(n);
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut me.inner).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) if read.filled().is_empty() => {
                    // The client is done: whatever is left goes as it is.
                    me.out.unsplit(me.raw.split());
                    if me.out.is_empty() {
                        return Poll::Ready(Ok(()));
                    }
                }
                Poll::Ready(Ok(())) => {
                    me.raw.extend_from_slice(read.filled());
                    me.process();
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for LocalAuthority<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S> tonic::transport::server::Connected for LocalAuthority<S> {
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A HEADERS frame of `headers` for `stream`, encoded by `encoder`.
    fn headers_frame(
        encoder: &mut loona_hpack::Encoder<'static>,
        stream: u32,
        headers: &[(&str, &str)],
    ) -> Vec<u8> {
        let block = encoder.encode(headers.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
        let mut f = BytesMut::new();
        f.put_uint(block.len() as u64, 3);
        f.put_u8(HEADERS);
        f.put_u8(END_HEADERS);
        f.put_u32(stream);
        f.put_slice(&block);
        f.to_vec()
    }

    /// The header blocks of the frames in `bytes` (after the preface).
    fn decode_all(bytes: &[u8]) -> Vec<Vec<(String, String)>> {
        let mut decoder = loona_hpack::Decoder::new();
        let mut rest = &bytes[PREFACE.len()..];
        let mut out = Vec::new();
        while rest.len() >= FRAME_HEADER {
            let len =
                (usize::from(rest[0]) << 16) | (usize::from(rest[1]) << 8) | usize::from(rest[2]);
            let (frame, later) = rest.split_at(FRAME_HEADER + len);
            rest = later;
            if frame[3] == HEADERS {
                let h = decoder.decode(&frame[FRAME_HEADER..]).unwrap();
                out.push(
                    h.into_iter()
                        .map(|(n, v)| {
                            (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap())
                        })
                        .collect(),
                );
            }
        }
        out
    }

    /// A path as authority becomes localhost, in each request of the
    /// connection (the second one encoded against the client's dynamic
    /// table); a valid one and every other header are kept; a SETTINGS
    /// frame passes as it is; bytes come split at any point.
    #[tokio::test]
    async fn a_path_authority_becomes_localhost_and_the_rest_is_kept() {
        let mut client_encoder = loona_hpack::Encoder::new();
        let mut sent = PREFACE.to_vec();
        sent.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        let request = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/v1beta1.Registration/Register"),
            (":authority", "/var/lib/kubelet/device-plugins/kubelet.sock"),
            ("content-type", "application/grpc"),
        ];
        sent.extend(headers_frame(&mut client_encoder, 1, &request));
        sent.extend(headers_frame(&mut client_encoder, 3, &request));
        let mut valid = request;
        valid[3] = (":authority", "localhost:1234");
        sent.extend(headers_frame(&mut client_encoder, 5, &valid));
        let (mut client, server) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            for piece in sent.chunks(7) {
                client.write_all(piece).await.unwrap();
            }
            client.shutdown().await.unwrap();
        });
        let mut received = Vec::new();
        LocalAuthority::new(server)
            .read_to_end(&mut received)
            .await
            .unwrap();
        writer.await.unwrap();
        assert_eq!(
            &received[..PREFACE.len() + 9],
            &{
                let mut p = PREFACE.to_vec();
                p.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
                p
            }[..]
        );
        let blocks = decode_all(&received);
        assert_eq!(blocks.len(), 3);
        for (i, block) in blocks.iter().enumerate() {
            let authority = &block.iter().find(|(n, _)| n == ":authority").unwrap().1;
            let want = if i < 2 { "localhost" } else { "localhost:1234" };
            assert_eq!(authority, want);
            assert_eq!(block.len(), 5);
            assert_eq!(block[2].1, "/v1beta1.Registration/Register");
        }
    }

    /// A frame larger than h2 takes passes as it came, without waiting for
    /// all of it: h2 refuses it.
    #[tokio::test]
    async fn an_oversized_frame_passes_untouched() {
        let mut sent = PREFACE.to_vec();
        sent.extend_from_slice(&[0x10, 0, 0, HEADERS, END_HEADERS, 0, 0, 0, 1, 0xff]);
        let (mut client, server) = tokio::io::duplex(64);
        client.write_all(&sent).await.unwrap();
        // The client stays, its frame unfinished: the bytes come anyway.
        let mut received = vec![0; sent.len()];
        let mut conn = LocalAuthority::new(server);
        tokio::time::timeout(Duration::from_secs(10), conn.read_exact(&mut received))
            .await
            .expect("the frame's start passed on before the rest came")
            .unwrap();
        assert_eq!(received, sent);
        drop(client);
    }

    #[tokio::test]
    async fn what_is_not_http2_passes_untouched() {
        let (mut client, server) = tokio::io::duplex(64);
        tokio::spawn(async move {
            client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
            client.shutdown().await.unwrap();
        });
        let mut received = Vec::new();
        LocalAuthority::new(server)
            .read_to_end(&mut received)
            .await
            .unwrap();
        assert_eq!(received, b"GET / HTTP/1.1\r\n\r\n");
    }
}
