//! flowmeshctl: the command-line client of flowmesh-controller (see docs/cli.md).
fn main() {
    flowmeshctl::main();
}
