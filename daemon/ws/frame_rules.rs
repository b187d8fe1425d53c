//! RFC 6455's rules for frames a client sends, beyond what fastwebsockets checks itself: every
//! violation becomes a close code and reason, so the client gets a close frame, not a reset.

use fastwebsockets::{CloseCode, Frame, OpCode, WebSocketError};

/// A close code and a reason for the client.
pub type Violation = (u16, &'static str);

/// Longest payload of a control frame (RFC 6455 section 5.5).
const MAX_CONTROL_PAYLOAD: usize = 125;

/// Maps a read error from fastwebsockets to the close it deserves; `None` when the connection
/// is simply gone (EOF, reset) and no close frame can or need be sent.
pub fn read_error(e: &WebSocketError) -> Option<Violation> {
    match e {
        WebSocketError::FrameTooLarge => Some((1009, "message too large")),
        WebSocketError::InvalidUTF8 => Some((1007, "invalid UTF-8 in a text frame")),
        WebSocketError::ReservedBitsNotZero => {
            Some((1002, "reserved bits set without an extension"))
        }
        WebSocketError::ControlFrameFragmented => Some((1002, "fragmented control frame")),
        WebSocketError::PingFrameTooLarge => Some((1002, "control frame over 125 bytes")),
        WebSocketError::InvalidValue => Some((1002, "reserved opcode")),
        WebSocketError::InvalidFragment | WebSocketError::InvalidContinuationFrame => {
            Some((1002, "invalid fragmentation"))
        }
        WebSocketError::InvalidCloseFrame => Some((1002, "close frame with a 1-byte payload")),
        WebSocketError::InvalidCloseCode => Some((1002, "invalid close code")),
        _ => None,
    }
}

/// Checks a frame that fastwebsockets accepted (it unmasks but does not insist on a mask, and
/// limits only pings to 125 bytes).
pub fn check(frame: &mut Frame<'_>) -> Result<(), Violation> {
    // The frame keeps its masking key after unmasking; its formatted header shows it.
    let mut head = [0u8; 16];
    frame.fmt_head(&mut head);
    check_parts(head[1] & 0x80 != 0, frame.opcode, frame.payload.len())
}

/// [`check`] on a frame's parts.
pub fn check_parts(masked: bool, opcode: OpCode, len: usize) -> Result<(), Violation> {
    if !masked {
        return Err((1002, "client frames must be masked"));
    }
    if is_control(opcode) && len > MAX_CONTROL_PAYLOAD {
        return Err((1002, "control frame over 125 bytes"));
    }
    Ok(())
}

fn is_control(opcode: OpCode) -> bool {
    matches!(opcode, OpCode::Close | OpCode::Ping | OpCode::Pong)
}

/// The close code to answer a client's close frame with: its own code (1000 when it sent
/// none), or the violation its payload commits.
pub fn close_reply(payload: &[u8]) -> Result<u16, Violation> {
    match payload {
        [] => Ok(1000),
        [_] => Err((1002, "close frame with a 1-byte payload")),
        [hi, lo, reason @ ..] => {
            let code = u16::from_be_bytes([*hi, *lo]);
            if !CloseCode::from(code).is_allowed() {
                return Err((1002, "invalid close code"));
            }
            if std::str::from_utf8(reason).is_err() {
                return Err((1007, "invalid UTF-8 in the close reason"));
            }
            Ok(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_must_be_masked_and_control_frames_short() {
        assert!(check_parts(true, OpCode::Binary, 1 << 20).is_ok());
        assert!(check_parts(true, OpCode::Ping, 125).is_ok());
        assert_eq!(check_parts(false, OpCode::Text, 1).unwrap_err().0, 1002);
        assert_eq!(check_parts(true, OpCode::Close, 126).unwrap_err().0, 1002);
        assert_eq!(check_parts(true, OpCode::Pong, 126).unwrap_err().0, 1002);
    }

    #[test]
    fn close_payloads() {
        assert_eq!(close_reply(b""), Ok(1000));
        assert_eq!(close_reply(&[0x03, 0xe8]), Ok(1000));
        assert_eq!(close_reply(&[0x0f, 0xa0, b'o', b'k']), Ok(4000));
        assert_eq!(close_reply(&[0x03]).unwrap_err().0, 1002);
        // 1005 and 1006 are never sent on the wire; 999 and 5000 are out of range.
        for code in [999u16, 1004, 1005, 1006, 1015, 5000] {
            assert_eq!(
                close_reply(&code.to_be_bytes()).unwrap_err().0,
                1002,
                "{code}"
            );
        }
        assert_eq!(close_reply(&[0x03, 0xe8, 0xff]).unwrap_err().0, 1007);
    }

    #[test]
    fn read_errors() {
        assert_eq!(
            read_error(&WebSocketError::ReservedBitsNotZero).map(|v| v.0),
            Some(1002)
        );
        assert_eq!(read_error(&WebSocketError::UnexpectedEOF), None);
    }
}
