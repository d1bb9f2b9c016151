//! Reading back the audio a speech test received.

/// What a WAV says of itself: `(channels, sample rate, byte rate, data bytes)`, its RIFF and data
/// sizes checked against its length.
///
/// # Panics
///
/// When `b` is not a WAV, or its sizes disagree with its length (a test's failure).
#[allow(clippy::panic, clippy::unwrap_used)]
pub fn wav(b: &[u8]) -> (u16, u32, u32, usize) {
    assert!(
        b.len() > 44 && &b[..4] == b"RIFF" && &b[8..12] == b"WAVE",
        "not a WAV"
    );
    let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
    let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    assert_eq!(
        u32_at(4) as usize,
        b.len() - 8,
        "the RIFF size is the file's"
    );
    let (mut at, mut fmt) = (12, None);
    while at + 8 <= b.len() {
        let size = u32_at(at + 4) as usize;
        match &b[at..at + 4] {
            b"fmt " => fmt = Some((u16_at(at + 10), u32_at(at + 12), u32_at(at + 16))),
            b"data" => {
                let (channels, rate, byte_rate) = fmt.expect("a fmt chunk before the data");
                assert_eq!(
                    size,
                    b.len() - at - 8,
                    "the data chunk's size is its length"
                );
                return (channels, rate, byte_rate, size);
            }
            _ => {}
        }
        at += 8 + size;
    }
    panic!("no data chunk");
}
