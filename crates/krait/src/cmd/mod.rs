//! One module per subcommand.

pub mod bench;
pub mod clocks;
pub mod demo;
pub mod history;
pub mod proxy;
pub mod refstore;
pub mod report;
pub mod serve;
pub mod serve_many;
pub mod status_server;
pub mod verify;
pub mod workload;
