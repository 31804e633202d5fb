//! YAML path -> line, for errors found after deserialisation (cross-field
//! checks). serde_yaml reports a location only for its own errors and keeps
//! no spans on values, so this walks the parser's marked events once.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

enum Frame {
    Map { path: String, key: Option<String> },
    Seq { path: String, next: usize },
}

#[derive(Default)]
struct Walker {
    stack: Vec<Frame>,
    lines: HashMap<String, usize>,
}

fn join(base: &str, key: &str) -> String {
    if base.is_empty() {
        key.to_string()
    } else {
        format!("{base}.{key}")
    }
}

impl Walker {
    /// The path of the value that starts now, consuming the pending key or
    /// sequence slot of the enclosing container. `None` when the event is a
    /// mapping key.
    fn value_path(&mut self, scalar: Option<&str>) -> Option<String> {
        match self.stack.last_mut() {
            None => Some(String::new()),
            Some(Frame::Seq { path, next }) => {
                let p = format!("{path}[{next}]");
                *next += 1;
                Some(p)
            }
            Some(Frame::Map { path, key }) => match key.take() {
                Some(k) => Some(join(path, &k)),
                None => {
                    *key = Some(scalar.unwrap_or("?").to_string());
                    None
                }
            },
        }
    }
}

impl MarkedEventReceiver for Walker {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        // Markers count lines from 1, as editors do (checked by the tests).
        let line = mark.line();
        match ev {
            Event::Scalar(v, ..) => {
                if let Some(p) = self.value_path(Some(&v)) {
                    self.lines.entry(p).or_insert(line);
                } else if let Some(Frame::Map { path, key: Some(k) }) = self.stack.last() {
                    // A key: errors about a field point at the key's line.
                    let p = join(path, k);
                    self.lines.insert(p, line);
                }
            }
            Event::Alias(_) => {
                if let Some(p) = self.value_path(None) {
                    self.lines.entry(p).or_insert(line);
                }
            }
            Event::MappingStart(..) => {
                let path = self.value_path(None).unwrap_or_default();
                self.lines.entry(path.clone()).or_insert(line);
                self.stack.push(Frame::Map { path, key: None });
            }
            Event::SequenceStart(..) => {
                let path = self.value_path(None).unwrap_or_default();
                self.lines.entry(path.clone()).or_insert(line);
                self.stack.push(Frame::Seq { path, next: 0 });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
            }
            _ => {}
        }
    }
}

pub struct LineIndex {
    lines: HashMap<String, usize>,
}

impl LineIndex {
    pub fn build(text: &str) -> LineIndex {
        let mut w = Walker::default();
        let mut p = Parser::new_from_str(text);
        // The text already deserialised, so it parses; if not, no lines.
        let _ = p.load(&mut w, false);
        LineIndex { lines: w.lines }
    }

    /// Line of `path`, or of its nearest ancestor that is in the file.
    pub fn line_of(&self, path: &str) -> Option<usize> {
        let mut p = path.to_string();
        loop {
            if let Some(l) = self.lines.get(&p) {
                return Some(*l);
            }
            let cut = p.rfind(['.', '['])?;
            p.truncate(cut);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_nested_paths() {
        let y = "a: 1\nb:\n  - x: 2\n  - x: 3\n    y:\n      - 4\n";
        let ix = LineIndex::build(y);
        assert_eq!(ix.line_of("a"), Some(1));
        assert_eq!(ix.line_of("b[0].x"), Some(3));
        assert_eq!(ix.line_of("b[1].x"), Some(4));
        assert_eq!(ix.line_of("b[1].y[0]"), Some(6));
        assert_eq!(
            ix.line_of("b[1].missing"),
            Some(4),
            "falls back to the parent"
        );
    }
}

/// Refuses YAML nested deeper than `max` before any parser sees it: the
/// flow collections' brackets (`[[[[...`, `{a: {a: ...`), counted outside
/// quotes and comments, and block nesting by indentation. No YAML library
/// bounds its own depth, hence this scan.
pub(crate) fn check_depth(text: &str, max: usize) -> Result<(), crate::SpecError> {
    let deep = |line: usize| crate::SpecError {
        path: String::new(),
        message: format!("nested deeper than {max} levels"),
        line: Some(line),
    };
    let mut depth = 0usize;
    for (n, l) in text.lines().enumerate() {
        let indent = l.len() - l.trim_start_matches([' ', '-']).len();
        if indent / 2 > max {
            return Err(deep(n + 1));
        }
        let mut quote: Option<char> = None;
        let mut escaped = false;
        for c in l.chars() {
            match quote {
                Some('"') if escaped => escaped = false,
                Some('"') if c == '\\' => escaped = true,
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None => match c {
                    '"' | '\'' => quote = Some(c),
                    '#' => break,
                    '[' | '{' => {
                        depth += 1;
                        if depth > max {
                            return Err(deep(n + 1));
                        }
                    }
                    ']' | '}' => depth = depth.saturating_sub(1),
                    _ => {}
                },
            }
        }
    }
    Ok(())
}
