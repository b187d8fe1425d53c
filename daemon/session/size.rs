//! The session size policy: the minimum rows and cols over the viewers that may write.

/// Largest session height, rows.
pub const MAX_ROWS: u16 = 500;
/// Largest session width, columns.
pub const MAX_COLS: u16 = 1000;

/// Clamps a requested size into the supported range.
pub fn clamp(rows: u16, cols: u16) -> (u16, u16) {
    (rows.clamp(1, MAX_ROWS), cols.clamp(1, MAX_COLS))
}

/// The size the session should have: rows and cols minimised separately over the sizes its
/// writers sent (the caller picks the writers); `current` when there is none.
pub fn session_size(
    sizes: impl IntoIterator<Item = (u16, u16)>,
    current: (u16, u16),
) -> (u16, u16) {
    sizes
        .into_iter()
        .reduce(|(r1, c1), (r2, c2)| (r1.min(r2), c1.min(c2)))
        .unwrap_or(current)
}

#[cfg(test)]
mod tests {
    use super::{clamp, session_size, MAX_COLS, MAX_ROWS};

    #[test]
    fn minimum_taken_separately() {
        assert_eq!(session_size([(40, 100), (30, 200)], (24, 80)), (30, 100));
    }

    #[test]
    fn no_sized_writer_keeps_current() {
        assert_eq!(session_size([], (33, 99)), (33, 99));
    }

    #[test]
    fn clamps() {
        assert_eq!(clamp(0, 0), (1, 1));
        assert_eq!(clamp(9999, 9999), (MAX_ROWS, MAX_COLS));
        assert_eq!(clamp(24, 80), (24, 80));
    }
}
