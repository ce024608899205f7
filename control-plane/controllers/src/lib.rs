//! The controllers inside a Fabrik cluster — what kube-controller-manager does for a real one.
//!
//! Every controller is written with kube-runtime against a plain [`kube::Client`], so the same
//! code runs over the in-process client of a tenant cluster and over HTTPS in tests.
//!
//! ```text
//!   run(client, shutdown)
//!    ├── gc           metadata watches of every served resource → owner/dependent graph
//!    ├── replicaset   ReplicaSet → Pods
//!    ├── deployment   Deployment → ReplicaSets (rolling update, recreate, history)
//!    ├── job          Job → Pods (completions, parallelism, backoff, indexed, TTL)
//!    └── serviceaccount   a `default` ServiceAccount in every namespace
//! ```
//!
//! Guarantees shared by all controllers:
//! - **Watch-driven.** A controller wakes only on a change of an object it watches (or a requeue
//!   it asked for with a deadline, e.g. `minReadySeconds`); idle objects cost no CPU.
//! - **Idempotent.** A reconcile reads the current state and computes the next step from it;
//!   running it twice changes nothing more.
//! - **No hot loops.** A failing reconcile is retried with a per-object exponential backoff
//!   (0.5 s doubling to 5 min) and reported as a `Warning` Event on the object.
//!
//! What this crate does not do: schedule pods, run them, or write pod status (that is a
//! kubelet's job; tests play it).

#![forbid(unsafe_code)]

pub mod deployment;
pub mod gc;
pub mod job;
pub mod replicaset;
pub mod serviceaccount;
mod shared;

pub use shared::Shutdown;

use std::future::Future;

/// Runs every controller until `shutdown` resolves. Returns when all stopped.
pub async fn run(client: kube::Client, shutdown: impl Future<Output = ()> + Send + 'static) {
    let shutdown = shared::shutdown(shutdown);
    futures::join!(
        gc::run(client.clone(), shutdown.clone()),
        replicaset::run(client.clone(), shutdown.clone()),
        deployment::run(client.clone(), shutdown.clone()),
        job::run(client.clone(), shutdown.clone()),
        serviceaccount::run(client, shutdown),
    );
}
