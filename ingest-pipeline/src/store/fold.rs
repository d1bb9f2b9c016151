//! Diacritics folded as SQLite's FTS5 tokenizer folds them (`remove_diacritics 2`): a Latin
//! letter with accents is its base letter (`é`, `ǖ` and `ệ` are `e`, `u` and `e`), so that
//! PostgreSQL's full text finds `café` by `cafe` and `cafe` by `café`, as SQLite's does. The
//! PostgreSQL column folds with `translate` over the same strings (the letters of Latin-1,
//! Latin Extended-A and -B and Latin Extended Additional whose canonical decomposition is an
//! ASCII letter and combining marks, as FTS5's table has them; and the combining marks FTS5
//! drops).

use std::borrow::Cow;

/// The letters with diacritics, in code point order; [`BASES`] has each one's base letter at
/// the same position.
pub const DIACRITICS: &str = "\
    ÀÁÂÃÄÅÇÈÉÊËÌÍÎÏÑÒÓÔÕÖÙÚÛÜÝàáâãäå\
    çèéêëìíîïñòóôõöùúûüýÿĀāĂăĄąĆćĈĉĊ\
    ċČčĎďĒēĔĕĖėĘęĚěĜĝĞğĠġĢģĤĥĨĩĪīĬĭĮ\
    įİĴĵĶķĹĺĻļĽľŃńŅņŇňŌōŎŏŐőŔŕŖŗŘřŚś\
    ŜŝŞşŠšŢţŤťŨũŪūŬŭŮůŰűŲųŴŵŶŷŸŹźŻżŽ\
    žƠơƯưǍǎǏǐǑǒǓǔǕǖǗǘǙǚǛǜǞǟǦǧǨǩǪǫǬǭǰ\
    ǴǵǸǹǺǻȀȁȂȃȄȅȆȇȈȉȊȋȌȍȎȏȐȑȒȓȔȕȖȗȘș\
    ȚțȞȟȦȧȨȩȪȫȬȭȮȯȰȱȲȳḀḁḂḃḄḅḆḇḈḉḊḋḌḍ\
    ḎḏḐḑḒḓḔḕḖḗḘḙḚḛḜḝḞḟḠḡḢḣḤḥḦḧḨḩḪḫḬḭ\
    ḮḯḰḱḲḳḴḵḶḷḸḹḺḻḼḽḾḿṀṁṂṃṄṅṆṇṈṉṊṋṌṍ\
    ṎṏṐṑṒṓṔṕṖṗṘṙṚṛṜṝṞṟṠṡṢṣṤṥṦṧṨṩṪṫṬṭ\
    ṮṯṰṱṲṳṴṵṶṷṸṹṺṻṼṽṾṿẀẁẂẃẄẅẆẇẈẉẊẋẌẍ\
    ẎẏẐẑẒẓẔẕẖẗẘẙẠạẢảẤấẦầẨẩẪẫẬậẮắẰằẲẳ\
    ẴẵẶặẸẹẺẻẼẽẾếỀềỂểỄễỆệỈỉỊịỌọỎỏỐốỒồ\
    ỔổỖỗỘộỚớỜờỞởỠỡỢợỤụỦủỨứỪừỬửỮữỰựỲỳ\
    ỴỵỶỷỸỹ";

/// The base letter of each letter of [`DIACRITICS`].
pub const BASES: &str = "\
    AAAAAACEEEEIIIINOOOOOUUUUYaaaaaa\
    ceeeeiiiinooooouuuuyyAaAaAaCcCcC\
    cCcDdEeEeEeEeEeGgGgGgGgHhIiIiIiI\
    iIJjKkLlLlLlNnNnNnOoOoOoRrRrRrSs\
    SsSsSsTtTtUuUuUuUuUuUuWwYyYZzZzZ\
    zOoUuAaIiOoUuUuUuUuUuAaGgKkOoOoj\
    GgNnAaAaAaEeEeIiIiOoOoRrRrUuUuSs\
    TtHhAaEeOoOoOoOoYyAaBbBbBbCcDdDd\
    DdDdDdEeEeEeEeEeFfGgHhHhHhHhHhIi\
    IiKkKkKkLlLlLlLlMmMmMmNnNnNnNnOo\
    OoOoOoPpPpRrRrRrRrSsSsSsSsSsTtTt\
    TtTtUuUuUuUuUuVvVvWwWwWwWwWwXxXx\
    YyZzZzZzhtwyAaAaAaAaAaAaAaAaAaAa\
    AaAaEeEeEeEeEeEeEeEeIiIiOoOoOoOo\
    OoOoOoOoOoOoOoOoUuUuUuUuUuUuUuYy\
    YyYyYy";

/// The combining diacritical marks FTS5 drops from a word (text in decomposed form: `e` and
/// U+0301 for `é`); the PostgreSQL column deletes them as well.
pub const MARKS: std::ops::RangeInclusive<char> = '\u{300}'..='\u{331}';

/// `word` with the diacritics of [`DIACRITICS`] folded and the [`MARKS`] removed (borrowed when
/// it has none).
pub fn fold_diacritics(word: &str) -> Cow<'_, str> {
    if word.is_ascii() {
        return Cow::Borrowed(word);
    }
    let folded: String = word
        .chars()
        .filter(|c| !MARKS.contains(c))
        .map(|c| {
            DIACRITICS
                .chars()
                .position(|d| d == c)
                .and_then(|i| BASES.chars().nth(i))
                .unwrap_or(c)
        })
        .collect();
    if folded == word {
        Cow::Borrowed(word)
    } else {
        Cow::Owned(folded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`DIACRITICS`] as a PostgreSQL Unicode-escaped literal's body (`\00C0\00C1…`): the
    /// migration's SQL stays ASCII, so that a server in another encoding can parse it.
    fn unicode_escaped(s: &str) -> String {
        s.chars()
            .map(|c| format!("\\{:04X}", u32::from(c)))
            .collect()
    }

    #[test]
    fn each_letter_has_one_base_and_the_postgres_column_folds_with_the_same_table() {
        assert_eq!(DIACRITICS.chars().count(), BASES.chars().count());
        assert!(BASES.chars().all(|c| c.is_ascii_alphabetic()));
        let letters: Vec<char> = DIACRITICS.chars().collect();
        assert!(
            letters.windows(2).all(|w| w[0] < w[1]),
            "in code point order, once each"
        );
        let sql = super::super::postgres::POSTGRES_V5;
        assert!(sql.is_ascii());
        assert!(
            sql.contains(&format!(
                "U&'{}{}', '{}'",
                unicode_escaped(DIACRITICS),
                unicode_escaped(&MARKS.collect::<String>()),
                BASES
            )),
            "the migration's table differs from DIACRITICS and BASES"
        );
    }

    #[test]
    fn words_lose_their_diacritics_only() {
        assert_eq!(fold_diacritics("café"), "cafe");
        assert_eq!(fold_diacritics("Ærø"), "Ærø");
        assert_eq!(fold_diacritics("Ðiện"), "Ðien");
        assert_eq!(fold_diacritics("ǖber"), "uber");
        assert_eq!(fold_diacritics("naïve"), "naive");
        assert_eq!(fold_diacritics("Škoda"), "Skoda");
        assert_eq!(fold_diacritics("東京"), "東京");
        assert_eq!(fold_diacritics("cafe\u{301}"), "cafe");
        assert_eq!(fold_diacritics("\u{1E0}"), "\u{1E0}");
        assert!(matches!(fold_diacritics("plain"), Cow::Borrowed(_)));
        assert!(matches!(fold_diacritics("東京"), Cow::Borrowed(_)));
    }
}
