//! Facts of the Pod Security Standards that more than one part of Fabrik checks pods against:
//! the API server's PodSecurity admission and the syncer's tenant pod policy.

/// The capabilities the baseline profile allows a container to add (upstream's list, names
/// without the `CAP_` prefix).
pub const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];
