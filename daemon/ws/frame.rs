//! The frames a server writes: unmasked and final, built straight into a buffer so that a batch
//! of them goes out in one write (or a header goes out beside a payload that stays where it is).

use fastwebsockets::{Frame, OpCode, Payload};

/// The longest WebSocket frame header a server writes (no mask).
pub const MAX_HEAD: usize = 10;

/// Appends `payload` as one unmasked, final WebSocket frame.
pub fn push_frame(out: &mut Vec<u8>, opcode: OpCode, payload: &[u8]) {
    push_head(out, opcode, payload);
    out.extend_from_slice(payload);
}

/// Appends only the header of an unmasked, final WebSocket frame carrying `payload`, for a
/// writer that sends the payload from where it is (vectored).
pub fn push_head(out: &mut Vec<u8>, opcode: OpCode, payload: &[u8]) {
    let mut head = [0u8; MAX_HEAD];
    let n = Frame::new(true, opcode, None, Payload::Borrowed(payload)).fmt_head(&mut head);
    out.extend_from_slice(&head[..n]);
}

/// Appends the close frame with `code` and `reason`.
pub fn push_close(out: &mut Vec<u8>, code: u16, reason: &str) {
    let frame = Frame::close(code, reason.as_bytes());
    push_frame(out, OpCode::Close, &frame.payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_unmasked_and_whole() {
        let mut out = Vec::new();
        push_frame(&mut out, OpCode::Binary, b"ab");
        assert_eq!(out, [0x82, 2, b'a', b'b']);
        out.clear();
        push_frame(&mut out, OpCode::Text, &[b'x'; 200]);
        assert_eq!(&out[..4], &[0x81, 126, 0, 200]);
        assert_eq!(out.len(), 4 + 200);
        out.clear();
        push_close(&mut out, 1000, "bye");
        assert_eq!(out, [0x88, 5, 0x03, 0xe8, b'b', b'y', b'e']);
    }
}
