//! Integration tests of `eddy-bridge`: one binary, one module per area.
//! The freight example's model and scenario are shared through `#[path]`.

mod crash;
mod crash_cases;
mod delivery;
#[path = "../../eddy-dynamo-cli/examples/freight/expect.rs"]
#[allow(dead_code)]
mod expect;
mod failures;
mod lifecycle;
#[path = "../../eddy-dynamo-cli/examples/freight/model.rs"]
#[allow(dead_code)]
mod model;
#[path = "../examples/deliverer/notices.rs"]
mod notices;
mod orders;
#[path = "../../eddy-dynamo-cli/examples/freight/scenario.rs"]
#[allow(dead_code)]
mod scenario;
