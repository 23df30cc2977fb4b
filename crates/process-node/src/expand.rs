//! Kubelet's `$(VAR)` expansion of command, args and env values.

/// Expands `$(NAME)` with `lookup`; `$$` is a literal `$`; unknown or unclosed references stay
/// as written (the rules of Kubernetes' `third_party/forked/golang/expansion`).
pub fn expand(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(tail) = after.strip_prefix('(')
            && let Some(end) = tail.find(')')
        {
            let name = &tail[..end];
            match lookup(name) {
                Some(v) => out.push_str(&v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &tail[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::expand;

    fn look(n: &str) -> Option<String> {
        (n == "A").then(|| "x".to_string())
    }

    #[test]
    fn kubelet_rules() {
        assert_eq!(expand("$(A)-$(B)", look), "x-$(B)");
        assert_eq!(expand("$$(A)", look), "$(A)");
        assert_eq!(expand("a$b$", look), "a$b$");
        assert_eq!(expand("$(A", look), "$(A");
    }
}
