//! "Did you mean ...?" for unknown names in specs and registries.

/// The known name closest to `name` (case-insensitive Levenshtein distance), if it is close
/// enough to be a plausible typo: at most max(2, len/2) edits.
pub fn closest<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let lower = name.to_lowercase();
    let limit = (name.chars().count() / 2).max(2);
    known.into_iter().map(|k| (strsim::levenshtein(&lower, &k.to_lowercase()), k)).min().filter(|(d, _)| *d <= limit).map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_only_plausible_typos() {
        let known = ["iris", "wine", "glass"];
        assert_eq!(closest("irsi", known), Some("iris"));
        assert_eq!(closest("Glas", known), Some("glass"));
        assert_eq!(closest("mnist", known), None);
    }
}
