//! STUB (replaced by the real module).
pub struct ScreenModel {
    p: vt100::Parser<crate::session::queries::QueryHook>,
    fed: bool,
}
impl ScreenModel {
    pub fn new(rows: u16, cols: u16, sb: usize) -> Self {
        Self {
            p: vt100::Parser::new_with_callbacks(
                std::num::NonZeroU16::new(rows).unwrap(),
                std::num::NonZeroU16::new(cols).unwrap(),
                sb,
                Default::default(),
            ),
            fed: false,
        }
    }
    pub fn process(&mut self, b: &[u8]) {
        self.fed = true;
        self.p.process(b)
    }
    pub fn pending_len(&self) -> usize {
        0
    }
    pub fn resize(&mut self, rows: u16, cols: u16) {
        self.p.set_size(
            std::num::NonZeroU16::new(rows).unwrap(),
            std::num::NonZeroU16::new(cols).unwrap(),
        )
    }
    pub fn size(&self) -> (u16, u16) {
        let (r, c) = self.p.screen().size();
        (r.get(), c.get())
    }
    pub fn screen(&self) -> &vt100::Screen {
        self.p.screen()
    }
    pub fn has_output(&self) -> bool {
        self.fed
    }
    pub fn snapshot_ansi(&self, _m: usize) -> Vec<u8> {
        self.p.screen().state_formatted().into_bytes()
    }
    pub fn scrollback_len(&self) -> usize {
        0
    }
}

impl ScreenModel {
    pub fn take_queries(&mut self) -> Vec<(crate::session::queries::Query, Vec<u8>)> {
        std::mem::take(&mut self.p.callbacks_mut().found)
    }
}
