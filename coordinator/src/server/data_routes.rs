//! The data plane's routes served: each [`DataRoute`] admitted by
//! [`admit`](super::admission::admit), then handed to its handler with the
//! [`Admission`](super::admission::Admission) (the handlers in `data` and `answers`).

use std::sync::Arc;
use std::time::Instant;

use http::{Request, Response};
use hyper::body::Incoming;

use super::admission::{DataRoute, admit};
use super::{App, answers, data};
use crate::data::proxy::{RespBody, error_response};

/// Serves a data-plane request: admission first, then the route's handler.
pub(super) async fn serve(
    app: &Arc<App>,
    route: DataRoute,
    req: Request<Incoming>,
) -> Response<RespBody> {
    let received = Instant::now();
    let admission = admit(&app.core, &route, req, received).await;
    let r = match route {
        // The inference handler counts refused requests in its route's metrics too.
        DataRoute::Infer(r) => return data::infer(app, r, admission, received).await,
        DataRoute::Models => admission.map(|a| data::models(app, &a)),
        DataRoute::Search => match admission {
            Ok(a) => data::search(app, a).await,
            Err(e) => Err(e),
        },
        DataRoute::Answer => match admission {
            Ok(a) => answers::answer(app, a).await,
            Err(e) => Err(e),
        },
        DataRoute::SubmitJob => match admission {
            Ok(a) => data::submit_job(app, a).await,
            Err(e) => Err(e),
        },
        DataRoute::GetJob(id) => match admission {
            Ok(a) => data::get_job(app, &a, &id).await,
            Err(e) => Err(e),
        },
        DataRoute::CancelJob(id) => match admission {
            Ok(a) => data::cancel_job(app, &a, &id).await,
            Err(e) => Err(e),
        },
    };
    r.unwrap_or_else(|e| error_response(&e))
}
