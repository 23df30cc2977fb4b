//! Counting the nodes of a text without building them, for what parsing it will cost.

use std::collections::HashMap;

use granit_parser::{Event, Parser};

/// The nodes (scalars, sequences, mappings) parsing `text` builds, in all its documents, an
/// alias counting as the nodes it repeats; `None` when `text` is not YAML. It reads the text
/// once as a stream of events, holding no more than the current scalar and one count per open
/// collection and per anchor, so it costs almost nothing whatever the text builds to.
pub fn count_nodes(text: &str) -> Option<u64> {
    let mut count: u64 = 0;
    // Open collections: their anchor (0 for none) and the count when they opened.
    let mut open: Vec<(usize, u64)> = Vec::new();
    // Nodes of each anchored node, for the aliases to it.
    let mut anchored: HashMap<usize, u64> = HashMap::new();
    for event in Parser::new_from_str(text) {
        let (event, _) = event.ok()?;
        match event {
            Event::Scalar(_, _, anchor, _) => {
                count = count.saturating_add(1);
                if anchor != 0 {
                    anchored.insert(anchor, 1);
                }
            }
            Event::SequenceStart(_, anchor, _) | Event::MappingStart(_, anchor, _) => {
                open.push((anchor, count));
                count = count.saturating_add(1);
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some((anchor, start)) = open.pop()
                    && anchor != 0
                {
                    anchored.insert(anchor, count - start);
                }
            }
            Event::Alias(id) => {
                count = count.saturating_add(anchored.get(&id).copied().unwrap_or(1));
            }
            _ => {}
        }
    }
    Some(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_is_counted_once_and_aliases_as_what_they_repeat() {
        assert_eq!(count_nodes("a: 1\n"), Some(3));
        assert_eq!(count_nodes("- 0\n- 0\n- 0\n"), Some(4));
        assert_eq!(count_nodes("a: 1\n---\nb: [x, y]\n"), Some(8));
        // &l is 4 nodes; each alias repeats them.
        assert_eq!(
            count_nodes("l: &l [1, 2, 3]\nm: *l\nn: *l\n"),
            Some(1 + 3 + 4 * 3)
        );
        assert_eq!(count_nodes("key: ${VALUE:=x}\n"), Some(3));
        // Braces are flow indicators: a template is counted with its expressions replaced.
        assert_eq!(count_nodes("other: [${A}]\n"), None);
        assert_eq!(count_nodes("a: [1, 2\n"), None);
        assert_eq!(count_nodes(""), Some(0));
    }
}
