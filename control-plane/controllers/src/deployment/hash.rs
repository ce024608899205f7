//! The `pod-template-hash` of a pod template: FNV-1a (32 bit) over the template, then the
//! collision count (little-endian u32), printed in decimal and mapped onto the alphabet of
//! upstream's `rand.SafeEncodeString` — the same shape of value upstream produces (upstream
//! hashes Go's object dump; Fabrik hashes the JSON of the template, so values differ).

use k8s_openapi::api::core::v1::PodTemplateSpec;

/// Upstream's alphabet of "safe" characters (no vowels, no confusable digits).
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn fnv1a(data: &[u8], mut h: u32) -> u32 {
    for b in data {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The hash label value of `template` with `collision_count`.
pub fn template_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let json = serde_json::to_vec(template).unwrap_or_default();
    let mut h = fnv1a(&json, 0x811c_9dc5);
    if let Some(c) = collision_count {
        h = fnv1a(&(c as u32).to_le_bytes(), h);
    }
    safe_encode(&h.to_string())
}

/// Maps each character onto the safe alphabet.
pub fn safe_encode(s: &str) -> String {
    s.chars()
        .map(|c| char::from(ALPHANUMS[(c as usize) % ALPHANUMS.len()]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn fnv_matches_reference_vectors() {
        assert_eq!(fnv1a(b"", 0x811c_9dc5), 0x811c_9dc5);
        assert_eq!(fnv1a(b"a", 0x811c_9dc5), 0xe40c_292c);
        assert_eq!(fnv1a(b"foobar", 0x811c_9dc5), 0xbf9c_f968);
    }

    #[test]
    fn hash_is_stable_safe_and_changes_with_template_and_collisions() {
        let t = PodTemplateSpec::default();
        let h = template_hash(&t, None);
        assert_eq!(h, template_hash(&t, None));
        assert!(h.bytes().all(|b| ALPHANUMS.contains(&b)));
        assert_ne!(h, template_hash(&t, Some(1)));
        let other = PodTemplateSpec {
            metadata: Some(ObjectMeta {
                name: Some("x".into()),
                ..Default::default()
            }),
            spec: None,
        };
        assert_ne!(h, template_hash(&other, None));
        assert_eq!(safe_encode("0123"), "4567");
    }
}
