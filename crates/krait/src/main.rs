//! The `krait` binary. Subcommands are wired in as their crates land.

fn main() {
    eprintln!("krait: not implemented yet");
    std::process::exit(2);
}
