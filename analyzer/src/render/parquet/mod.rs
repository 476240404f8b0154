//! Parquet: a run as typed tables, for the engines people already run (DuckDB, Polars,
//! Spark, Trino). Every table lies under `DIR/TABLE/run=ID/rank=R/` in hive style, so that
//! one directory of many runs and ranks is one dataset; the tables and their columns are
//! documented in docs/parquet.md. Written with the Apache Arrow project's own crates.

mod events;
mod held;
mod tables;

pub use events::EventSpill;
pub use held::write_held;
pub use tables::{write_gpus, write_tables};

use arrow_array::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// Hive's name for a partition whose value is null (a process without a rank): DuckDB,
/// Spark and Arrow read it back as null.
pub const NULL_PARTITION: &str = "__HIVE_DEFAULT_PARTITION__";

/// Where one run's tables go in the dataset at `root`.
pub struct Dataset {
    pub root: PathBuf,
    /// The run's partition value, as written in paths.
    run: String,
    /// Replace files of an earlier export of this run (`--force`).
    pub replace: bool,
}

impl Dataset {
    pub fn new(root: &Path, run_id: &str, replace: bool) -> Dataset {
        Dataset {
            root: root.to_path_buf(),
            run: partition_value(run_id),
            replace,
        }
    }

    /// The file `name` of `table` for a process of rank `rank` (`None`: no rank), its
    /// directories made.
    pub fn process_file(
        &self,
        table: &str,
        rank: Option<&str>,
        name: &str,
    ) -> Result<PathBuf, String> {
        let rank = rank
            .filter(|r| !r.is_empty())
            .map_or(NULL_PARTITION.to_string(), partition_value);
        let dir = self
            .root
            .join(table)
            .join(format!("run={}", self.run))
            .join(format!("rank={rank}"));
        make_dirs(&self.root, &dir)?;
        Ok(dir.join(name))
    }

    /// The file of a table of the whole run (not one process's), its directories made.
    pub fn run_file(&self, table: &str) -> Result<PathBuf, String> {
        let dir = self.root.join(table).join(format!("run={}", self.run));
        make_dirs(&self.root, &dir)?;
        Ok(dir.join("run.parquet"))
    }

    /// Writes `batches` (all of one schema) as the Parquet file `path`, created new.
    pub fn write(&self, path: &Path, batches: &[RecordBatch]) -> Result<(), String> {
        let Some(first) = batches.first() else {
            return Ok(());
        };
        let mut writer = self.writer(path, first.schema())?;
        for b in batches {
            writer.write(b).map_err(|e| parquet_error(path, e))?;
        }
        writer.close().map_err(|e| parquet_error(path, e))?;
        Ok(())
    }

    /// A writer of the Parquet file `path`, created new (0600, no symbolic link followed).
    pub fn writer(
        &self,
        path: &Path,
        schema: arrow_schema::SchemaRef,
    ) -> Result<ArrowWriter<std::fs::File>, String> {
        let file = crate::output_file::create(path, self.replace).map_err(|e| {
            if self.replace {
                e
            } else {
                format!("{e}: this run was exported there before (--force replaces its files)")
            }
        })?;
        ArrowWriter::try_new(file, schema, Some(properties())).map_err(|e| parquet_error(path, e))
    }
}

fn properties() -> WriterProperties {
    // zstd's fastest level: a third of the size of uncompressed pages at little cost.
    let level = ZstdLevel::try_new(1).unwrap_or_default();
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        .build()
}

fn parquet_error(path: &Path, e: parquet::errors::ParquetError) -> String {
    format!("{}: cannot write: {e}", path.display())
}

/// `value` as a path segment: letters, digits, `.`, `_` and `-` as they are, any other
/// byte `%XX` (as Hive writes partition values), so that no value names another directory.
pub fn partition_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    // `.` and `..` alone would name this directory or its parent.
    if out.bytes().all(|b| b == b'.') {
        out = out.replace('.', "%2E");
    }
    out
}

/// Makes `dir` and the directories between `root` and it (0700), refusing a symbolic link
/// on the way: a link planted there would send the files elsewhere.
fn make_dirs(root: &Path, dir: &Path) -> Result<(), String> {
    let mut at = PathBuf::new();
    for part in dir.components() {
        at.push(part);
        if !at.starts_with(root) && at != *root {
            continue;
        }
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() && at != *root => {
                return Err(format!(
                    "{}: is a symbolic link; not followed",
                    at.display()
                ))
            }
            Ok(m) if m.is_dir() || m.file_type().is_symlink() => {}
            Ok(_) => return Err(format!("{}: is not a directory", at.display())),
            Err(_) => std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&at)
                .or_else(|e| if at.is_dir() { Ok(()) } else { Err(e) })
                .map_err(|e| format!("{}: cannot create: {e}", at.display()))?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_values_name_no_other_directory() {
        assert_eq!(
            partition_value("20261205-125729-26048"),
            "20261205-125729-26048"
        );
        assert_eq!(partition_value("123.0"), "123.0");
        assert_eq!(partition_value("a/b=c"), "a%2Fb%3Dc");
        assert_eq!(partition_value(".."), "%2E%2E");
        assert_eq!(partition_value(""), "");
        assert_eq!(partition_value("é"), "%C3%A9");
    }
}
