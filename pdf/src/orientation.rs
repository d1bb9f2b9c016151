//! Pages scanned sideways or upside down: Tesseract's orientation and script detection
//! (`--psm 0`) says how far to turn the image, and the image is turned before it is read.
//!
//! The pipeline detects it once per page, when the page is rendered
//! (ingest-pipeline's `PipelineConfig::orientation`): the page
//! image written is the upright one, so whatever reads it (Tesseract, a vision model, each of
//! its tiles) and the visual embedder all get it upright. A [`TesseractReader`](crate::vision::TesseractReader)
//! used alone detects it itself ([`with_orientation`](crate::vision::TesseractReader::with_orientation)).

use std::io::Cursor;

use image::ImageFormat;

use crate::reading::VisionError;

/// Least confidence of Tesseract's orientation answer acted on: below it (a page with little
/// text, a figure) the image is read as it is. Tesseract reports values from 0 to about 30 for
/// a full page of text; its authors treat 2 as the edge of reliable answers.
pub const MIN_CONFIDENCE: f32 = 2.0;

/// Tesseract's orientation answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Orientation {
    /// Degrees to turn the image clockwise to make it upright (0, 90, 180, 270).
    pub rotate: u16,
    /// Tesseract's confidence in it.
    pub confidence: f32,
}

/// Parses the output of `tesseract IMAGE stdout --psm 0` (`Rotate: 90`, `Orientation
/// confidence: 7.5`, ...); `None` when either line is missing or the angle is not a right one.
pub fn parse_osd(out: &str) -> Option<Orientation> {
    let field = |name: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_owned())
    };
    let rotate: u16 = field("Rotate:")?.parse().ok()?;
    let confidence: f32 = field("Orientation confidence:")?.parse().ok()?;
    matches!(rotate, 0 | 90 | 180 | 270).then_some(Orientation { rotate, confidence })
}

/// `image` turned `degrees` clockwise (90, 180 or 270; anything else gives it back as it is).
pub fn rotate_rgb(image: image::RgbImage, degrees: u16) -> image::RgbImage {
    match degrees {
        90 => image::imageops::rotate90(&image),
        180 => image::imageops::rotate180(&image),
        270 => image::imageops::rotate270(&image),
        _ => image,
    }
}

/// The PNG `png` turned `degrees` clockwise (90, 180 or 270; anything else leaves it as it is).
pub fn rotate_png(png: &[u8], degrees: u16) -> Result<Vec<u8>, VisionError> {
    let bad = |e: image::ImageError| VisionError::Image(e.to_string());
    let img = image::load_from_memory_with_format(png, ImageFormat::Png).map_err(bad)?;
    let turned = match degrees {
        90 => img.rotate90(),
        180 => img.rotate180(),
        270 => img.rotate270(),
        _ => img,
    };
    let mut out = Vec::with_capacity(png.len());
    turned
        .write_to(&mut Cursor::new(&mut out), ImageFormat::Png)
        .map_err(bad)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn osd_output_is_parsed() {
        let out = "Page number: 0\nOrientation in degrees: 270\nRotate: 90\n\
                   Orientation confidence: 7.46\nScript: Latin\nScript confidence: 3.33\n";
        assert_eq!(
            parse_osd(out),
            Some(Orientation {
                rotate: 90,
                confidence: 7.46
            })
        );
        assert_eq!(parse_osd("Too few characters. Skipping this page"), None);
        assert_eq!(parse_osd("Rotate: 45\nOrientation confidence: 9\n"), None);
    }

    #[test]
    fn a_png_turns_clockwise() {
        // 2 x 1: black then white; turned 90° clockwise it is 1 x 2, black on top.
        let img = image::GrayImage::from_raw(2, 1, vec![0, 255]).unwrap();
        let mut png = Vec::new();
        img.write_to(&mut Cursor::new(&mut png), ImageFormat::Png)
            .unwrap();
        let turned = image::load_from_memory(&rotate_png(&png, 90).unwrap())
            .unwrap()
            .into_luma8();
        assert_eq!(turned.dimensions(), (1, 2));
        assert_eq!(turned.as_raw(), &vec![0, 255]);
        let back = image::load_from_memory(&rotate_png(&png, 180).unwrap())
            .unwrap()
            .into_luma8();
        assert_eq!(back.as_raw(), &vec![255, 0]);
    }

    #[test]
    fn an_rgb_image_turns_clockwise() {
        // 2 x 1: black then white.
        let img = image::RgbImage::from_raw(2, 1, vec![0, 0, 0, 255, 255, 255]).unwrap();
        let turned = rotate_rgb(img.clone(), 90);
        assert_eq!(turned.dimensions(), (1, 2));
        assert_eq!(turned.get_pixel(0, 0).0, [0, 0, 0]);
        let turned = rotate_rgb(img.clone(), 270);
        assert_eq!(turned.get_pixel(0, 0).0, [255, 255, 255]);
        assert_eq!(
            rotate_rgb(img.clone(), 180).as_raw(),
            &vec![255, 255, 255, 0, 0, 0]
        );
        assert_eq!(rotate_rgb(img.clone(), 0), img);
    }
}
