//! Host names of tenant objects: one translation, shared by the syncer, the control plane and
//! the node agent, and **injective** — two different tenant objects never get one host name.
//!
//! Tenant `t`'s object `name` in namespace `ns` lives in host namespace `fabrik-<t>` (one per
//! tenant, so only `(name, ns)` has to be told apart inside it) as:
//!
//! * **readable** `<name>-x-<ns>-x-<t>` when that is at most 62 characters and `ns` neither
//!   contains `-x-` nor starts with `x-`;
//! * **hashed** otherwise: a readable prefix of that string (at most 30 characters, trailing
//!   `-` and `.` trimmed), `-`, and the SHA-256 of `<name>/<ns>/<t>` in hex, cut so that the whole
//!   is exactly 63 characters (at least 32 hex digits, 128 bits).
//!
//! Why this is injective: a readable name is at most 62 characters and a hashed one exactly
//! 63, so the two forms never meet. Among readable names, strip the fixed `-x-<t>` suffix; in
//! what is left the *last* `-x-` is always the separator, because `ns` has no `-x-` and does not
//! start with `x-` (the only ways a later `-x-` could appear), so `name` and `ns` are read back
//! uniquely. Hashed names collide only if SHA-256 does; its input separates the parts with `/`,
//! which no name, namespace or tenant contains.
//!
//! The translation is a pure function of its inputs, the same on every run, release and
//! machine. An earlier scheme (readable up to 63 characters for every namespace, FNV-1a past
//! that) was not injective; the syncer migrates host objects named by it (see the syncer's
//! `migrate` module).

use sha2::{Digest, Sha256};

/// Prefix of the host namespace of a tenant: `fabrik-<tenant>`.
pub const HOST_NAMESPACE_PREFIX: &str = crate::HOST_NAMESPACE_PREFIX;

/// The longest host name: a DNS label (Services and pod hostnames need one).
pub const MAX_NAME: usize = 63;

/// The longest readable host name; hashed names are exactly [`MAX_NAME`] long.
pub const MAX_READABLE: usize = MAX_NAME - 1;

/// The longest readable prefix kept in front of a hashed name's digest.
const HASH_PREFIX: usize = 30;

/// Tenant names refused because their host namespace is one Fabrik itself uses
/// (`fabrik-system` holds the node agents' usage counters and, by default, the chart's release).
pub const RESERVED_TENANT_NAMES: &[&str] = &["system"];

/// The host namespace of a tenant.
pub fn host_namespace(tenant: &str) -> String {
    format!("{HOST_NAMESPACE_PREFIX}{tenant}")
}

/// The tenant a host namespace belongs to, if it is one by name.
pub fn tenant_of_namespace(namespace: &str) -> Option<&str> {
    namespace
        .strip_prefix(HOST_NAMESPACE_PREFIX)
        .filter(|t| !t.is_empty())
}

/// Whether a tenant namespace can be written readably (see the module docs).
fn readable_namespace(namespace: &str) -> bool {
    !namespace.contains("-x-") && !namespace.starts_with("x-")
}

/// The host name of tenant object `name` in namespace `namespace` of `tenant`.
pub fn host_name(name: &str, namespace: &str, tenant: &str) -> String {
    let full = format!("{name}-x-{namespace}-x-{tenant}");
    if full.len() <= MAX_READABLE && readable_namespace(namespace) {
        return full;
    }
    let mut prefix: String = full.chars().take(HASH_PREFIX).collect();
    while prefix.ends_with('-') || prefix.ends_with('.') {
        prefix.pop();
    }
    let digest = Sha256::digest(format!("{name}/{namespace}/{tenant}").as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let digits = MAX_NAME - 1 - prefix.len();
    if prefix.is_empty() {
        // Not reachable for valid names (they start with an alphanumeric character); keep the
        // length rule anyway.
        return hex[..MAX_NAME].to_string();
    }
    format!("{prefix}-{}", &hex[..digits])
}

/// The host name the earlier, non-injective scheme gave (readable up to 63 characters, else a
/// 46-character prefix and FNV-1a). Only for recognising host objects to migrate.
pub fn legacy_host_name(name: &str, namespace: &str, tenant: &str) -> String {
    let full = format!("{name}-x-{namespace}-x-{tenant}");
    if full.len() <= MAX_NAME {
        return full;
    }
    let mut prefix: String = full.chars().take(MAX_NAME - 1 - 16).collect();
    while prefix.ends_with('-') || prefix.ends_with('.') {
        prefix.pop();
    }
    format!("{prefix}-{:016x}", fnv1a(full.as_bytes()))
}

/// FNV-1a, 64 bits (not collision resistant: used only where a collision costs nothing, such as
/// spreading Event names, and to recognise legacy host names).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// `text` — a message from the host about tenant `tenant`'s objects — with the readable host
/// names of that tenant's objects (`<name>-x-<ns>-x-<tenant>`, with or without
/// `fabrik-<tenant>/` in front) written as the tenant knows them: `<ns>/<name>`. A word is
/// rewritten only where it reads back to exactly that host name (the translation is
/// injective), so other tenants' names, hashed names and anything else are left as they are.
pub fn tenant_words(text: &str, tenant: &str) -> String {
    tenant_words_with(text, tenant, &|_| None)
}

/// [`tenant_words`], and hashed host names too, which do not read back: `hashed` says which
/// tenant object (namespace, name) a word of the hashed form ([`MAX_NAME`] long, ending in hex
/// digits) might be the host name of — the syncer knows, from the host objects it made — and
/// the word is rewritten only where it is exactly that object's host name in `tenant`.
pub fn tenant_words_with(
    text: &str,
    tenant: &str,
    hashed: &dyn Fn(&str) -> Option<(String, String)>,
) -> String {
    let suffix = format!("-x-{tenant}");
    let in_namespace = format!("{}/", host_namespace(tenant));
    let name_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
    // (Names and namespaces begin and end with a letter or digit: `-x--x-<t>` reads back to
    // nothing a tenant could have made.)
    let valid = |part: &str| {
        part.starts_with(|c: char| c.is_ascii_alphanumeric())
            && part.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    let readable = |word: &str| -> Option<(String, String)> {
        let rest = word.strip_suffix(&suffix)?;
        let (name, namespace) = rest.rsplit_once("-x-")?;
        (valid(name) && valid(namespace) && host_name(name, namespace, tenant) == word)
            .then(|| (namespace.into(), name.into()))
    };
    let of_hashed_form = |word: &str| {
        word.len() == MAX_NAME
            && word.rsplit_once('-').is_some_and(|(_, digits)| {
                !digits.is_empty()
                    && digits
                        .chars()
                        .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
            })
    };
    let read_back = |word: &str| -> Option<(String, String)> {
        readable(word).or_else(|| {
            let (namespace, name) = of_hashed_form(word).then(|| hashed(word)).flatten()?;
            (host_name(&name, &namespace, tenant) == word).then_some((namespace, name))
        })
    };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(name_char) {
        let (before, from) = rest.split_at(start);
        let end = from.find(|c| !name_char(c)).unwrap_or(from.len());
        let (word, after) = from.split_at(end);
        out.push_str(before);
        // (A sentence's full stop is not part of a name.)
        let trimmed = word.trim_end_matches('.');
        match read_back(trimmed) {
            Some((namespace, name)) => {
                if out.ends_with(&in_namespace)
                    && !out[..out.len() - in_namespace.len()].ends_with(name_char)
                {
                    out.truncate(out.len() - in_namespace.len());
                }
                out.push_str(&namespace);
                out.push('/');
                out.push_str(&name);
                out.push_str(&word[trimmed.len()..]);
            }
            None => out.push_str(word),
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_in_a_message_read_as_the_tenant_knows_them() {
        let claim = host_name("huge", "default", "team-a");
        let pod = host_name("web", "prod", "team-a");
        let odd = host_name("a-x-b", "prod", "team-a");
        let theirs = host_name("web", "prod", "team-b");
        let hashed = host_name(&"n".repeat(60), "prod", "team-a");
        assert_eq!(
            tenant_words(
                &format!("cannot allocate resource claim {claim}."),
                "team-a"
            ),
            "cannot allocate resource claim default/huge."
        );
        assert_eq!(
            tenant_words(&format!("pod fabrik-team-a/{pod} and {odd}: x"), "team-a"),
            "pod prod/web and prod/a-x-b: x"
        );
        // Another tenant's, a hashed one, a word that only looks like one, non-ASCII: as is.
        for text in [
            format!("{theirs} waits"),
            format!("{hashed} waits"),
            "web-x-team-a waits".to_string(),
            "préemption de web-x-x-team-a — ok".to_string(),
        ] {
            assert_eq!(tenant_words(&text, "team-a"), text);
        }
        assert_eq!(tenant_words("", "team-a"), "");
        // Hashed names, where the caller knows which object one was made for — checked: an
        // answer that is not that word's object leaves the word as it is.
        let long = "n".repeat(60);
        let knows = |word: &str| (word == hashed).then(|| ("prod".to_string(), long.clone()));
        assert_eq!(
            tenant_words_with(&format!("pod {hashed} waits"), "team-a", &knows),
            format!("pod prod/{long} waits")
        );
        let wrong = |_: &str| Some(("prod".to_string(), "web".to_string()));
        let text = format!("pod {hashed} waits; {theirs}");
        assert_eq!(tenant_words_with(&text, "team-a", &wrong), text);
        // Another tenant's object of the same name: not team-a's, whatever the caller says.
        let of_b = host_name(&long, "prod", "team-b");
        let any = |_: &str| Some(("prod".to_string(), long.clone()));
        let text = format!("pod {of_b} waits");
        assert_eq!(tenant_words_with(&text, "team-a", &any), text);
        // Text a tenant controls (a container's termination message) goes through it too:
        // any string comes back whole, rewritten only where a name reads back.
        let long = "x-".repeat(5000);
        for text in [
            "...".to_string(),
            "fabrik-team-a/".to_string(),
            format!("é{pod}é"),
            format!("fabrik-team-a/fabrik-team-a/{pod}"),
            format!("xfabrik-team-a/{pod}"),
            long.clone(),
            format!("{long}-x-team-a"),
            "-x--x-team-a -x-default-x-team-a".to_string(),
        ] {
            let out = tenant_words(&text, "team-a");
            let expected = text
                .replace(&format!("/fabrik-team-a/{pod}"), "/prod/web")
                .replace(&format!("xfabrik-team-a/{pod}"), "xfabrik-team-a/prod/web")
                .replace(&pod, "prod/web");
            assert_eq!(out, expected, "{text:?}");
        }
    }

    use std::collections::HashMap;

    #[test]
    fn short_names_are_readable() {
        assert_eq!(host_name("web", "default", "a"), "web-x-default-x-a");
        assert_eq!(host_namespace("a"), "fabrik-a");
        assert_eq!(tenant_of_namespace("fabrik-a"), Some("a"));
        assert_eq!(tenant_of_namespace("fabrik-"), None);
        assert_eq!(tenant_of_namespace("default"), None);
    }

    #[test]
    fn the_collisions_of_the_old_scheme_are_gone() {
        // Pod `a-x-b` in `c` and pod `a` in `b-x-c`.
        assert_ne!(host_name("a-x-b", "c", "t"), host_name("a", "b-x-c", "t"));
        assert_eq!(
            legacy_host_name("a-x-b", "c", "t"),
            legacy_host_name("a", "b-x-c", "t")
        );
        // Secret `a` in `b2-x-c2` and Secret `a-x-b2` in `c2`.
        assert_ne!(
            host_name("a", "b2-x-c2", "t"),
            host_name("a-x-b2", "c2", "t")
        );
        // A namespace starting with `x-`: `a-x` in `x-b` against `a-x-x` in `b`.
        assert_ne!(host_name("a-x", "x-b", "t"), host_name("a-x-x", "b", "t"));
    }

    #[test]
    fn hashed_names_are_exactly_63_and_readable_ones_shorter() {
        let ns = "n";
        let t = "t";
        let base = MAX_READABLE - "-x-n-x-t".len();
        let name62 = "a".repeat(base);
        let h = host_name(&name62, ns, t);
        assert_eq!(h.len(), 62);
        assert!(h.ends_with("-x-n-x-t"));
        let name63 = "a".repeat(base + 1);
        let h = host_name(&name63, ns, t);
        assert_eq!(h.len(), MAX_NAME);
        assert!(!h.ends_with("-x-n-x-t"));
        let h = host_name("web", "a-x-b", t);
        assert_eq!(h.len(), MAX_NAME, "{h}");
        assert!(h.starts_with("web-x-a-x-b-x-t-"), "{h}");
    }

    #[test]
    fn hashed_names_are_stable_and_never_end_with_a_separator() {
        let name = format!("{}-{}", "b".repeat(HASH_PREFIX - 1), "c".repeat(40));
        let h = host_name(&name, "ns", "t");
        assert!(!h.contains("--"), "{h}");
        assert_eq!(h.len(), MAX_NAME);
        // Pinned: a change of the scheme would orphan every hashed host object.
        assert_eq!(h, host_name(&name, "ns", "t"));
        assert_eq!(
            host_name("web", "x-ns", "t"),
            "web-x-x-ns-x-t-338a7a46c1d4829ad4d83fd13b068a1ff546be737c0adfc2"
        );
    }

    #[test]
    fn legacy_names_are_the_old_scheme() {
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        let name = "a-very-long-deployment-name-7d9f8c6b5-abcde";
        let h = legacy_host_name(name, "production-namespace", "team-alpha");
        assert!(h.len() <= MAX_NAME);
        assert!(h.starts_with("a-very-long-deployment-name-7d9f8c6b5-abcde-x"));
    }

    /// Every pair of distinct (name, namespace) over a small alphabet that favours the separator
    /// maps to distinct host names.
    #[test]
    fn injective_over_an_exhaustive_small_alphabet() {
        let parts = [
            "a", "x", "a-x", "x-a", "a-x-b", "x-x", "b-x-c", "x-", "-x", "a-x-x-b", "xx", "x-x-x",
        ];
        let valid = |s: &str| !s.starts_with('-') && !s.ends_with('-');
        let mut seen: HashMap<String, (String, String)> = HashMap::new();
        for name in parts.iter().filter(|s| valid(s)) {
            for ns in parts.iter().filter(|s| valid(s)) {
                for pad in [0, 20, 48, 52] {
                    let name = format!("{name}{}", "n".repeat(pad));
                    let h = host_name(&name, ns, "t-x-u");
                    assert!(h.len() <= MAX_NAME);
                    if let Some(prev) = seen.insert(h.clone(), (name.clone(), ns.to_string())) {
                        assert_eq!(prev, (name.clone(), ns.to_string()), "{h}");
                    }
                }
            }
        }
    }
}
