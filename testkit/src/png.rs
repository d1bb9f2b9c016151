//! PNG files written by hand, for the decoders' ceilings: a header may declare any size.

/// A valid PNG whose header declares `width` x `height` RGBA pixels and whose data is one tiny
/// zlib stream: a decompression bomb's header (11585 x 11585 is 537 MB to decode) in about 70
/// bytes. A decoder that trusts the header allocates the whole image before it finds the data
/// short.
pub fn declaring(width: u32, height: u32) -> Vec<u8> {
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 6, 0, 0, 0]); // 8 bits, RGBA, deflate, no filter, no interlace
    chunk(&mut png, b"IHDR", &ihdr);
    // A zlib stream of one empty stored block.
    chunk(
        &mut png,
        b"IDAT",
        &[
            0x78, 0x01, 0x01, 0x00, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x01,
        ],
    );
    chunk(&mut png, b"IEND", &[]);
    png
}

fn chunk(png: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    png.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = png.len();
    png.extend_from_slice(kind);
    png.extend_from_slice(data);
    let crc = crc32(&png[start..]);
    png.extend_from_slice(&crc.to_be_bytes());
}

/// CRC-32 (IEEE), as PNG's chunks carry it.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crc_is_png_s() {
        // The IEND chunk's CRC every PNG ends with.
        assert_eq!(crc32(b"IEND"), 0xae42_6082);
        let png = declaring(11585, 11585);
        assert!(png.len() < 100, "{}", png.len());
        assert_eq!(&png[16..24], &[0, 0, 0x2d, 0x41, 0, 0, 0x2d, 0x41]);
    }
}
