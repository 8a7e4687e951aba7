//! Test support: the Open vSwitch sandbox and network-namespace lab harness.
