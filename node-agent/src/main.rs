//! `fabrik-node-agent`: the GPU node agent.

fn main() {}
