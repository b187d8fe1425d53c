//! STUB (replaced by the real module).
pub const CHUNK_PAYLOAD: usize = 8 * 1024;
pub const MAX_CHUNKS: usize = 255;
pub struct EncodedSnapshot {
    pub frames: Vec<bytes::Bytes>,
    pub ansi_len: usize,
    pub gzip_len: usize,
    pub scrollback_lines: usize,
}
pub fn encode(
    model: &crate::session::screen::ScreenModel,
    max_scrollback: usize,
) -> EncodedSnapshot {
    use std::io::Write;
    let ansi = model.snapshot_ansi(max_scrollback);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&ansi).unwrap();
    let gz = gz.finish().unwrap();
    let chunks: Vec<&[u8]> = gz.chunks(CHUNK_PAYLOAD).collect();
    let total = chunks.len();
    let frames = chunks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut f = vec![2u8, i as u8, total as u8];
            f.extend_from_slice(c);
            bytes::Bytes::from(f)
        })
        .collect();
    EncodedSnapshot {
        frames,
        ansi_len: ansi.len(),
        gzip_len: gz.len(),
        scrollback_lines: 0,
    }
}
