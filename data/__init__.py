"""Domain models and the only module (`data.io`) that reads and writes JSON, JSONL and parquet."""
