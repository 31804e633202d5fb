//! The analysis report's JSON Schema (`docs/analysis.schema.json`) is the
//! one the types generate, and a real report validates against its shape.
//! To refresh it: WIRELAB_BLESS=1 cargo test -p wirelab-analyze --test schema

#[test]
fn committed_analysis_schema_is_current() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/analysis.schema.json");
    let now = wirelab_analyze::report::json_schema();
    if std::env::var_os("WIRELAB_BLESS").is_some() {
        std::fs::write(&path, &now).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        committed, now,
        "docs/analysis.schema.json is stale; WIRELAB_BLESS=1 regenerates it"
    );
    // The schema names every top-level field a report has.
    let schema: serde_json::Value = serde_json::from_str(&now).unwrap();
    let props = schema["properties"].as_object().unwrap();
    for f in [
        "schema",
        "source",
        "vantage",
        "connections",
        "analyzers",
        "expect",
        "malformed",
    ] {
        assert!(props.contains_key(f), "{f}");
    }
}
