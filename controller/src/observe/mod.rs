//! What the tasks count and the endpoints read: controller-wide metrics and each switch's
//! status. Below every task: nothing here imports the rest of the controller.

pub mod allocator;
pub mod metrics;
pub mod switch_status;

pub use metrics::Metrics;
pub use switch_status::SwitchStatus;
