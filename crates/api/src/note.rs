//! Short human-readable notes for conditions, events and errors: a list of names cut to what
//! an event note (and a readable condition message) holds, the rest counted, so a message
//! naming what was found instead of a missing thing never grows without bound. Shared by the
//! operator, the release sources and the kubectl plugin, so every list reads alike.

/// The longest note events.k8s.io accepts, in bytes: a longer one gets the whole event
/// refused.
pub const NOTE_LIMIT: usize = 1024;

/// `head`, then as many of `items` (joined by `sep`) as fit in an event note, then `tail`;
/// the items left out are counted ("… and 12 more") so the note is never refused as too long.
pub fn list_note(head: &str, items: &[String], sep: &str, tail: &str) -> String {
    list_within(NOTE_LIMIT, head, items, sep, tail)
}

/// The budget of a list of what was found instead of a missing thing, in bytes: half a note,
/// so the message around it (which names the missing thing) still fits in one.
pub const FOUND_LIMIT: usize = NOTE_LIMIT / 2;

/// `head` and the names in `found` (as many as fit in [`FOUND_LIMIT`], the rest counted), or
/// `none` when nothing was found: the part of a "not found" message that shows the user what
/// is there instead.
pub fn found_note(head: &str, found: &[String], none: &str) -> String {
    if found.is_empty() {
        return none.to_string();
    }
    list_within(FOUND_LIMIT, head, found, ", ", "")
}

/// [`list_note`] within `limit` bytes.
fn list_within(limit: usize, head: &str, items: &[String], sep: &str, tail: &str) -> String {
    let full = format!("{head}{}{tail}", items.join(sep));
    if full.len() <= limit {
        return full;
    }
    let mut note = head.to_string();
    for (i, item) in items.iter().enumerate() {
        let joined = if i == 0 { 0 } else { sep.len() };
        let marker = more_marker(items.len() - i - 1);
        if note.len() + joined + item.len() + marker.len() + tail.len() > limit {
            note.push_str(&more_marker(items.len() - i));
            break;
        }
        if i > 0 {
            note.push_str(sep);
        }
        note.push_str(item);
    }
    note.push_str(tail);
    clip_to(limit, note)
}

fn more_marker(left_out: usize) -> String {
    if left_out == 0 {
        String::new()
    } else {
        format!(" … and {left_out} more")
    }
}

/// `note` cut to [`NOTE_LIMIT`] bytes (on a character boundary), ending in "…" when cut.
pub fn clip_note(note: String) -> String {
    clip_to(NOTE_LIMIT, note)
}

fn clip_to(limit: usize, mut note: String) -> String {
    const CUT: &str = " …";
    if note.len() <= limit {
        return note;
    }
    let mut end = limit - CUT.len();
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    note.truncate(end);
    note.push_str(CUT);
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_list_note_fits_an_event_and_counts_what_is_left_out() {
        // What a release of 200 privileged objects gives.
        let items: Vec<String> = (0..200)
            .map(|i| format!("ClusterRoleBinding wide-{i:03} binds cluster-admin"))
            .collect();
        let note = list_note("privileged: ", &items, "; ", " (applied)");
        assert!(note.len() <= NOTE_LIMIT, "{} bytes", note.len());
        assert!(note.starts_with("privileged: ClusterRoleBinding wide-000 binds cluster-admin; "));
        assert!(note.ends_with(" (applied)"), "{note}");
        let shown = note.matches("binds cluster-admin").count();
        assert!(shown > 10, "as many as fit are shown: {shown}");
        assert!(
            note.contains(&format!(" … and {} more (applied)", 200 - shown)),
            "{note}"
        );
        // A short list is left whole.
        let few = list_note("p: ", &items[..2], "; ", "");
        assert_eq!(
            few,
            "p: ClusterRoleBinding wide-000 binds cluster-admin; ClusterRoleBinding wide-001 binds cluster-admin"
        );
        // One item longer than the limit by itself: cut, still within it.
        let huge = vec!["é".repeat(2000)];
        let note = list_note("p: ", &huge, "; ", "");
        assert!(note.len() <= NOTE_LIMIT, "{} bytes", note.len());
    }

    #[test]
    fn a_long_note_is_cut_on_a_character_boundary() {
        assert_eq!(clip_note("short".into()), "short");
        let exact = "x".repeat(NOTE_LIMIT);
        assert_eq!(clip_note(exact.clone()), exact);
        for filler in ["x", "é", "€", "😀"] {
            let cut = clip_note(filler.repeat(NOTE_LIMIT + 1));
            assert!(cut.len() <= NOTE_LIMIT, "{filler}: {} bytes", cut.len());
            assert!(cut.len() > NOTE_LIMIT - 8, "{filler}: cut too much");
            assert!(cut.ends_with(" …"), "{filler}");
        }
    }

    #[test]
    fn a_found_list_keeps_to_half_a_note_and_says_when_nothing_was_found() {
        assert_eq!(found_note("found: ", &[], "nothing found"), "nothing found");
        let few = vec!["a".to_string(), "b".to_string()];
        assert_eq!(found_note("found: ", &few, "-"), "found: a, b");
        let many: Vec<String> = (0..300).map(|i| format!("configmap-{i:03}")).collect();
        let note = found_note("found: ", &many, "-");
        assert!(note.len() <= FOUND_LIMIT, "{} bytes", note.len());
        assert!(
            note.starts_with("found: configmap-000, configmap-001"),
            "{note}"
        );
        let shown = note.matches("configmap-").count();
        assert!(
            note.ends_with(&format!(" … and {} more", 300 - shown)),
            "{note}"
        );
    }
}
