//! GPU-aware placement, pure: what a scheduler sees of nodes and pending pods ([`model`]), where
//! one pod fits and on which devices ([`fit`], with ResourceClaims in [`claims`] and pod
//! affinity and topology spread in [`affinity`]), and one scheduling round with gangs all or
//! nothing ([`plan`]).
//!
//! The simulated scheduler of `fabrik up` (`fabrik_sim::scheduler`) binds pods by [`plan`]; the
//! control plane's GPU queue ([`crate::queue`]) decides with [`fit`] on real hosts too.

pub mod affinity;
pub mod claims;
pub mod fit;
pub mod model;
pub mod plan;
