//! Admin routes the coordinator's owner adds (`/api/v1/NAME/...` behind the admin key): the
//! seam's [`AdminExtension`](horos_server_control::AdminExtension).

pub use horos_server_control::{AdminAnswer, AdminExtension};
