use polars::prelude::*;
fn main() {
    let path = std::env::args().nth(1).unwrap();
    let f = std::fs::File::open(&path).unwrap();
    let df = ParquetReader::new(f).finish().unwrap();
    let mut out = std::fs::File::create(std::env::args().nth(2).unwrap()).unwrap();
    let mut df = df;
    CsvWriter::new(&mut out).finish(&mut df).unwrap();
}
