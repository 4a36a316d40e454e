//! JSON for f64 values that may be NaN or infinite. serde_json writes those as `null` and
//! cannot read `null` back as a number, so one stored NaN would make a record unreadable.
//! Finite numbers are written as numbers (records of finite values are byte-for-byte as before);
//! NaN, inf and -inf as the strings `"NaN"`, `"inf"`, `"-inf"`. Reading also accepts `null`
//! (as NaN), which older records hold.
//!
//! Used as `#[serde(with = "nonfinite::scalar")]` (f64), `nonfinite::vec` (Vec<f64>),
//! `nonfinite::map` (BTreeMap<String, f64>) and `nonfinite::vec_map` (BTreeMap<String, Vec<f64>>).
use serde::de::Error;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;

/// One f64 as JSON.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct JsonF64(pub f64);

impl Serialize for JsonF64 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.0;
        if v.is_finite() {
            s.serialize_f64(v)
        } else if v.is_nan() {
            s.serialize_str("NaN")
        } else if v > 0.0 {
            s.serialize_str("inf")
        } else {
            s.serialize_str("-inf")
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Repr {
    Number(f64),
    Text(String),
    Null(()),
}

impl<'de> Deserialize<'de> for JsonF64 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Repr::deserialize(d)? {
            Repr::Number(v) => Ok(JsonF64(v)),
            Repr::Null(()) => Ok(JsonF64(f64::NAN)),
            Repr::Text(t) => match t.as_str() {
                "NaN" => Ok(JsonF64(f64::NAN)),
                "inf" => Ok(JsonF64(f64::INFINITY)),
                "-inf" => Ok(JsonF64(f64::NEG_INFINITY)),
                other => Err(D::Error::custom(format!("expected a number, \"NaN\", \"inf\" or \"-inf\", got \"{other}\""))),
            },
        }
    }
}

pub mod scalar {
    use super::*;
    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        JsonF64(*v).serialize(s)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(JsonF64::deserialize(d)?.0)
    }
}

pub mod vec {
    use super::*;
    pub fn serialize<S: Serializer>(v: &[f64], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|x| JsonF64(*x)))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
        Ok(Vec::<JsonF64>::deserialize(d)?.into_iter().map(|x| x.0).collect())
    }
}

pub mod map {
    use super::*;
    pub fn serialize<S: Serializer>(m: &BTreeMap<String, f64>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(m.iter().map(|(k, v)| (k, JsonF64(*v))))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, f64>, D::Error> {
        Ok(BTreeMap::<String, JsonF64>::deserialize(d)?.into_iter().map(|(k, v)| (k, v.0)).collect())
    }
}

pub mod vec_map {
    use super::*;
    pub fn serialize<S: Serializer>(m: &BTreeMap<String, Vec<f64>>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(m.iter().map(|(k, v)| (k, v.iter().map(|x| JsonF64(*x)).collect::<Vec<_>>())))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, Vec<f64>>, D::Error> {
        Ok(BTreeMap::<String, Vec<JsonF64>>::deserialize(d)?.into_iter().map(|(k, v)| (k, v.into_iter().map(|x| x.0).collect())).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Holder {
        // Fields in alphabetical order, as serde_json::json! writes keys.
        #[serde(with = "scalar")]
        a: f64,
        #[serde(with = "map")]
        m: BTreeMap<String, f64>,
        #[serde(with = "vec")]
        v: Vec<f64>,
        #[serde(with = "vec_map")]
        vm: BTreeMap<String, Vec<f64>>,
    }

    fn same_bits(x: f64, y: f64) -> bool {
        x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
    }

    #[test]
    fn every_special_value_survives_a_round_trip_and_finite_ones_are_plain_numbers() {
        let specials = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0, 1.5e-310, f64::MAX, f64::MIN_POSITIVE, -2.5];
        for &x in &specials {
            let h = Holder { a: x, v: vec![x, 1.0], m: [("k".to_string(), x)].into(), vm: [("w".to_string(), vec![x])].into() };
            let text = serde_json::to_string(&h).unwrap();
            let back: Holder = serde_json::from_str(&text).unwrap();
            assert!(
                same_bits(back.a, x) && same_bits(back.v[0], x) && same_bits(back.m["k"], x) && same_bits(back.vm["w"][0], x),
                "{x} via {text}"
            );
            if x.is_finite() {
                assert_eq!(
                    text,
                    serde_json::to_string(&serde_json::json!({"a": x, "v": [x, 1.0], "m": {"k": x}, "vm": {"w": [x]}})).unwrap()
                );
            }
        }
        // Older records hold null where a NaN was; a bad string is an error naming what is expected.
        let old: Holder = serde_json::from_str(r#"{"a": null, "v": [], "m": {"k": null}, "vm": {}}"#).unwrap();
        assert!(old.a.is_nan() && old.m["k"].is_nan());
        let e = serde_json::from_str::<Holder>(r#"{"a": "Infinity", "v": [], "m": {}, "vm": {}}"#).unwrap_err().to_string();
        assert!(e.contains("data did not match") || e.contains("expected a number"), "{e}");
    }
}
