//! Partitioning: from the desired layout and the GPUs as they are, plan the MIG steps per GPU
//! ([`plan_gpu`], pure), then apply them to free GPUs, verify, and report a [`Phase`].
//!
//! Contract of [`reconcile`]:
//! * An invalid layout is refused before any step: phase `failed`, nothing changed, the layout
//!   in force stays.
//! * A GPU that needs a change while a pod uses it is left alone; the phase stays `pending`
//!   with a reason naming the GPU and the pods.
//! * The state is saved before the first step and after each GPU is done, so a restart resumes
//!   a change (the plan is recomputed from the GPUs as they are, which makes resuming and
//!   re-running the same thing).
//! * A step failure stops that GPU, reports `failed` with the step and the cause, and is
//!   retried on later passes up to [`MAX_ATTEMPTS`] times for the same desired layout.
//! * Idempotent: with nothing to do, nothing is called but the inventory.

use std::collections::BTreeMap;

use fabrik_gpu::layout::{self, GpuTarget, PlannedMig};
use fabrik_gpu::profiles::Placement;
use thiserror::Error;

use crate::backend::{self, GpuBackend, GpuInfo};
use crate::state::{self, AgentState, Phase};

/// Failed attempts at one desired layout before the agent stops retrying it.
pub const MAX_ATTEMPTS: u32 = 3;

/// Errors that stop a pass (as opposed to a layout that fails, which is an outcome).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading the GPUs failed.
    #[error("reading GPU inventory: {0}")]
    Inventory(#[source] backend::Error),
    /// The state file could not be saved.
    #[error(transparent)]
    State(#[from] state::Error),
}

/// One hardware step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Destroy a MIG device.
    DestroyMig {
        /// Its UUID.
        uuid: String,
        /// Its profile (for messages).
        profile: String,
    },
    /// Turn MIG mode on or off.
    SetMigMode(bool),
    /// Create a MIG device.
    CreateMig(PlannedMig),
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::DestroyMig { uuid, profile } => write!(f, "destroy MIG {profile} {uuid}"),
            Step::SetMigMode(on) => write!(f, "set MIG mode {}", if *on { "on" } else { "off" }),
            Step::CreateMig(m) => {
                write!(f, "create MIG {} at slice {}", m.profile, m.placement.start)
            }
        }
    }
}

/// The steps that take `gpu` from what it is to `target`; empty when it is there already.
/// Instances already in the right place are kept.
pub fn plan_gpu(gpu: &GpuInfo, target: &GpuTarget) -> Vec<Step> {
    let mut steps = Vec::new();
    match target {
        GpuTarget::Mig { instances } => {
            if !gpu.mig_enabled {
                steps.push(Step::SetMigMode(true));
            }
            let wanted = |p: &str, at: Placement| {
                instances
                    .iter()
                    .any(|w| w.profile == p && w.placement == at)
            };
            for have in &gpu.mig {
                if !wanted(&have.profile, have.placement) {
                    steps.push(Step::DestroyMig {
                        uuid: have.uuid.clone(),
                        profile: have.profile.clone(),
                    });
                }
            }
            for want in instances {
                let present = gpu
                    .mig
                    .iter()
                    .any(|h| h.profile == want.profile && h.placement == want.placement);
                if !present {
                    steps.push(Step::CreateMig(want.clone()));
                }
            }
        }
        GpuTarget::Whole | GpuTarget::TimeSliced { .. } | GpuTarget::Shared { .. } => {
            for have in &gpu.mig {
                steps.push(Step::DestroyMig {
                    uuid: have.uuid.clone(),
                    profile: have.profile.clone(),
                });
            }
            if gpu.mig_enabled {
                steps.push(Step::SetMigMode(false));
            }
        }
    }
    steps
}

/// What a pass did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Where the layout stands.
    pub phase: Phase,
    /// Why.
    pub reason: String,
    /// Whether phase or reason differ from before the pass.
    pub changed: bool,
    /// The steps carried out, as messages (for Events).
    pub done: Vec<String>,
    /// The GPUs whose change waits for the pods using them to end, and those pods
    /// (`namespace/name`): their devices are not offered meanwhile, so that no new pod lands
    /// there and the change can apply.
    pub waiting: Busy,
}

/// Pods using each GPU index.
pub type Busy = BTreeMap<u32, Vec<String>>;

/// One pass: see the module documentation. `desired` is the annotation text (absent = whole
/// GPUs); `save` persists the state.
pub fn reconcile(
    backend: &mut dyn GpuBackend,
    desired: Option<&str>,
    busy: &Busy,
    st: &mut AgentState,
    save: &mut dyn FnMut(&AgentState) -> Result<(), state::Error>,
) -> Result<Outcome, Error> {
    let before = (st.phase, st.reason.clone());
    let desired_text = desired.unwrap_or("mode: whole").to_string();
    if st.desired.as_deref() != Some(desired_text.as_str()) {
        st.desired = Some(desired_text.clone());
        st.target = None;
        st.attempts = 0;
        st.phase = Phase::Pending;
        st.reason = "new layout".into();
    }
    let finish = |st: &mut AgentState, done: Vec<String>, waiting: Busy| Outcome {
        phase: st.phase,
        reason: st.reason.clone(),
        changed: (st.phase, st.reason.clone()) != before,
        done,
        waiting,
    };
    let gpus = backend.inventory().map_err(Error::Inventory)?;
    let target = match layout::parse(&desired_text).and_then(|l| layout::resolve(&l, &gpus)) {
        Ok(t) => t,
        Err(e) => {
            st.phase = Phase::Failed;
            st.reason = e.to_string();
            save(st)?;
            return Ok(finish(st, Vec::new(), Busy::new()));
        }
    };
    if st.phase == Phase::Failed && st.attempts >= MAX_ATTEMPTS {
        return Ok(finish(st, Vec::new(), Busy::new()));
    }
    st.target = Some(target.clone());
    let mut done = Vec::new();
    let mut waiting = Vec::new();
    let mut waiting_gpus = Busy::new();
    let mut failure = None;
    for gpu in &gpus {
        let Some(want) = target.gpus.get(&gpu.index) else {
            continue;
        };
        let steps = plan_gpu(gpu, want);
        if steps.is_empty() && st.applied.get(&gpu.index) == Some(want) {
            continue;
        }
        if let Some(pods) = busy.get(&gpu.index).filter(|p| !p.is_empty()) {
            waiting.push(format!("GPU {} (in use by {})", gpu.index, pods.join(", ")));
            waiting_gpus.insert(gpu.index, pods.clone());
            continue;
        }
        // Persist intent before touching the GPU.
        st.phase = Phase::Pending;
        st.applied.remove(&gpu.index);
        save(st)?;
        if let Err(e) = apply_steps(backend, gpu, &steps, &mut done) {
            failure = Some(e);
            break;
        }
        st.applied.insert(gpu.index, want.clone());
        save(st)?;
    }
    // Verify what was changed against the hardware as it now is.
    if failure.is_none() && !done.is_empty() {
        let now = backend.inventory().map_err(Error::Inventory)?;
        for gpu in &now {
            if let Some(want) = target.gpus.get(&gpu.index) {
                let left = plan_gpu(gpu, want);
                if !left.is_empty() && st.applied.contains_key(&gpu.index) {
                    st.applied.remove(&gpu.index);
                    failure = Some(format!(
                        "GPU {}: verification failed, still to do: {}",
                        gpu.index,
                        join(&left)
                    ));
                }
            }
        }
    }
    if let Some(reason) = failure {
        st.attempts += 1;
        st.phase = Phase::Failed;
        st.reason = if st.attempts >= MAX_ATTEMPTS {
            format!("{reason} (gave up after {} attempts)", st.attempts)
        } else {
            format!("{reason} (attempt {}, will retry)", st.attempts)
        };
    } else if !waiting.is_empty() {
        st.phase = Phase::Pending;
        st.reason = format!("waiting for {}", waiting.join("; "));
    } else {
        st.phase = Phase::Applied;
        st.reason = format!("layout {} applied to {} GPUs", target.mode, gpus.len());
    }
    save(st)?;
    Ok(finish(st, done, waiting_gpus))
}

fn join(steps: &[Step]) -> String {
    steps
        .iter()
        .map(Step::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs the steps of one GPU in order; stops at the first failure and says which.
fn apply_steps(
    backend: &mut dyn GpuBackend,
    gpu: &GpuInfo,
    steps: &[Step],
    done: &mut Vec<String>,
) -> Result<(), String> {
    for (i, step) in steps.iter().enumerate() {
        let result = match step {
            Step::DestroyMig { uuid, .. } => backend.destroy_mig(gpu.index, uuid),
            Step::SetMigMode(on) => backend.set_mig_mode(gpu.index, *on),
            Step::CreateMig(m) => match gpu.model.profile(&m.profile) {
                Ok(p) => backend.create_mig(gpu.index, p, m.placement).map(|_| ()),
                Err(e) => {
                    return Err(format!("GPU {}: {e}", gpu.index));
                }
            },
        };
        match result {
            Ok(()) => done.push(format!("GPU {}: {step}", gpu.index)),
            Err(e) => {
                return Err(format!(
                    "GPU {}: step {} of {} ({step}) failed: {e}",
                    gpu.index,
                    i + 1,
                    steps.len()
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::simulated::{self, Simulated};
    use std::path::Path;

    fn sim(text: &str) -> Simulated {
        let spec = simulated::parse(Path::new("t"), text).expect("spec");
        Simulated::from_spec(&spec, "n").expect("sim")
    }

    fn pass(b: &mut Simulated, desired: &str, busy: &Busy, st: &mut AgentState) -> Outcome {
        reconcile(b, Some(desired), busy, st, &mut |_| Ok(())).expect("pass")
    }

    const MIG: &str = "mode: mig\ngeometry: all-balanced";

    #[test]
    fn applies_verifies_and_is_idempotent() {
        let mut b = sim("gpus: [{model: H200-141GB, count: 2}]");
        let mut st = AgentState::default();
        let out = pass(&mut b, MIG, &Busy::new(), &mut st);
        assert_eq!(out.phase, Phase::Applied, "{out:?}");
        assert_eq!(out.done.len(), 2 * 5, "mode on + 4 creates per GPU");
        let inv = b.inventory().expect("inv");
        assert_eq!(inv[1].mig.len(), 4);
        let again = pass(&mut b, MIG, &Busy::new(), &mut st);
        assert!(again.done.is_empty() && !again.changed, "{again:?}");
        let back = pass(&mut b, "mode: whole", &Busy::new(), &mut st);
        assert_eq!(back.phase, Phase::Applied);
        assert!(!b.inventory().expect("inv")[0].mig_enabled);
    }

    #[test]
    fn busy_gpus_wait_and_say_so() {
        let mut b = sim("gpus: [{model: H100-80GB, count: 2}]");
        let mut st = AgentState::default();
        let busy = Busy::from([(1, vec!["team-a/train-0".to_string()])]);
        let out = pass(&mut b, "mode: mig\ngeometry: all-1g.10gb", &busy, &mut st);
        assert_eq!(out.phase, Phase::Pending);
        assert!(
            out.reason.contains("GPU 1 (in use by team-a/train-0)"),
            "{out:?}"
        );
        let inv = b.inventory().expect("inv");
        assert_eq!(inv[0].mig.len(), 7, "the free GPU is changed");
        assert!(inv[1].mig.is_empty(), "the busy GPU is not");
        // Only the busy GPU waits (it is not offered meanwhile).
        assert_eq!(
            out.waiting,
            Busy::from([(1, vec!["team-a/train-0".to_string()])])
        );
        let out = pass(
            &mut b,
            "mode: mig\ngeometry: all-1g.10gb",
            &Busy::new(),
            &mut st,
        );
        assert_eq!(out.phase, Phase::Applied);
        assert!(out.waiting.is_empty());
        // A mixed layout changes one GPU and leaves the other as it is.
        let mixed = r#"{"mode": "mixed", "default": {"mode": "mig", "geometry": "all-1g.10gb"},
                        "perGpu": {"0": {"mode": "whole"}}}"#;
        let out = pass(&mut b, mixed, &busy, &mut st);
        assert_eq!(out.phase, Phase::Applied, "{out:?}");
        let inv = b.inventory().expect("inv");
        assert!(!inv[0].mig_enabled, "GPU 0 whole");
        assert_eq!(inv[1].mig.len(), 7, "GPU 1, busy, untouched");
    }

    #[test]
    fn invalid_layout_fails_without_touching_gpus() {
        let mut b = sim("gpus: [{model: H200-141GB, count: 1}]");
        let mut st = AgentState::default();
        pass(&mut b, MIG, &Busy::new(), &mut st);
        let before = b.inventory().expect("inv");
        let out = pass(
            &mut b,
            "mode: mig\ngeometry: all-7g.80gb",
            &Busy::new(),
            &mut st,
        );
        assert_eq!(out.phase, Phase::Failed);
        assert!(out.reason.contains("has no MIG profile"), "{}", out.reason);
        assert_eq!(b.inventory().expect("inv"), before);
    }

    #[test]
    fn a_failed_step_is_reported_and_a_restart_resumes() {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("sim.yaml");
        std::fs::write(
            &file,
            "gpus: [{model: A100-40GB, count: 1}]\nfailMigOperationsAfter: 3",
        )
        .expect("write");
        let mig_state = dir.path().join("mig.json");
        let state_file = state::path(dir.path());
        let mut save = |s: &AgentState| state::save(&state_file, s);
        let desired = "mode: mig\ngeometry: all-1g.5gb";
        {
            let mut b = Simulated::load(&file, "n", Some(mig_state.clone()), None).expect("load");
            let mut st = state::load(&state::path(dir.path())).expect("state");
            let out =
                reconcile(&mut b, Some(desired), &Busy::new(), &mut st, &mut save).expect("pass");
            assert_eq!(out.phase, Phase::Failed);
            assert!(out.reason.contains("step 4 of 8"), "{}", out.reason);
            assert!(out.reason.contains("will retry"), "{}", out.reason);
        }
        // A new process, after the driver fault is gone: the simulated GPU kept its 2
        // instances, the state its intent.
        std::fs::write(&file, "gpus: [{model: A100-40GB, count: 1}]").expect("write");
        let mut b = Simulated::load(&file, "n", Some(mig_state), None).expect("reload");
        let mut st = state::load(&state::path(dir.path())).expect("state");
        assert_eq!(st.phase, Phase::Failed);
        assert_eq!(b.inventory().expect("inv")[0].mig.len(), 2);
        let out = reconcile(&mut b, Some(desired), &Busy::new(), &mut st, &mut save).expect("pass");
        assert_eq!(out.phase, Phase::Applied, "{out:?}");
        assert_eq!(out.done.len(), 5, "only the remaining creates");
        assert_eq!(b.inventory().expect("inv")[0].mig.len(), 7);
    }

    #[test]
    fn gives_up_after_max_attempts() {
        let mut b = sim("gpus: [{model: A100-80GB, count: 1}]\nfailMigOperationsAfter: 0");
        let mut st = AgentState::default();
        for _ in 0..MAX_ATTEMPTS {
            pass(&mut b, MIG, &Busy::new(), &mut st);
        }
        assert!(st.reason.contains("gave up"), "{}", st.reason);
        let out = pass(&mut b, MIG, &Busy::new(), &mut st);
        assert!(out.done.is_empty() && !out.changed);
    }

    #[test]
    fn plan_keeps_instances_in_place() {
        let mut gpu = crate::backend::tests::gpus("H200-141GB", 1).remove(0);
        gpu.mig_enabled = true;
        gpu.mig.push(crate::backend::MigInstance {
            uuid: "MIG-a".into(),
            profile: "3g.71gb".into(),
            placement: Placement { start: 4, size: 4 },
        });
        gpu.mig.push(crate::backend::MigInstance {
            uuid: "MIG-b".into(),
            profile: "1g.18gb".into(),
            placement: Placement { start: 0, size: 1 },
        });
        let target = GpuTarget::Mig {
            instances: vec![
                PlannedMig {
                    profile: "4g.71gb".into(),
                    placement: Placement { start: 0, size: 4 },
                },
                PlannedMig {
                    profile: "3g.71gb".into(),
                    placement: Placement { start: 4, size: 4 },
                },
            ],
        };
        let steps = plan_gpu(&gpu, &target);
        assert_eq!(steps.len(), 2, "{steps:?}");
        assert!(matches!(&steps[0], Step::DestroyMig { uuid, .. } if uuid == "MIG-b"));
        assert!(matches!(&steps[1], Step::CreateMig(m) if m.profile == "4g.71gb"));
    }
}
