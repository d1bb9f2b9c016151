//! What an operator acts on from the status page, and reads when a server misbehaves: the admin
//! key field with the "Unload all" action (a `fetch()` POST to the admin API with the key typed
//! on the page, never embedded in it nor sent in a URL), and the last lines of each server's
//! log. Without script the page still reads; only the actions need it.

use horos_server_control::LogChunk;
use maud::{Markup, html};

/// Unloads every pooled model that is neither pinned nor busy (`POST /api/v1/models/unload`),
/// with the key typed on the page.
pub(super) const UNLOAD_ALL: &str = "async function unloadAll(){const k=document.getElementById('admin-key');const h=k&&k.value?{'authorization':'Bearer '+k.value}:{};const o=document.getElementById('unload-result');try{const r=await fetch('/api/v1/models/unload',{method:'POST',headers:h});const t=await r.text();if(!o)return;if(r.ok){const v=JSON.parse(t);o.textContent='unloaded: '+((v.unloaded||[]).join(', ')||'none')+'; stays (pinned or busy): '+((v.kept||[]).join(', ')||'none')}else{o.textContent=r.status+' '+t}}catch(e){if(o)o.textContent=String(e)}}";

/// The admin key field (its value stays in the page, has no `name`: a form submitted without
/// script never puts it in a URL) and the "Unload all" button.
pub(super) fn admin_actions() -> Markup {
    html! {
        form id="admin-actions" onsubmit="return false" {
            label { "admin key " input id="admin-key" type="password" autocomplete="off"; }
            " "
            button type="button" onclick="unloadAll()" { "Unload all" }
            " "
            span id="unload-result" {}
        }
    }
}

/// The last lines of each server's log (escaped, as every value on the page).
pub(super) fn logs(tails: &[LogChunk]) -> Markup {
    html! {
        @if !tails.is_empty() {
            h2 { "Server logs" }
            p { "the last lines of each; " code { "horos-ref logs NAME -f" } " follows one" }
            @for t in tails {
                h3 { (t.name) }
                pre class="log" { (t.text) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{PageParts, render};
    use super::*;
    use crate::control::snapshot::Snapshot;
    use crate::data::metrics::Metrics;

    #[test]
    fn the_page_shows_log_lines_escaped_and_an_unload_form_without_the_key() {
        let logs = [LogChunk {
            name: "think-gpu0".into(),
            text: "ready <script>alert(1)</script> & \"done\"\n".into(),
            next: 40,
        }];
        let parts = PageParts {
            allow_cloud: false,
            models: &[],
            sections: &[],
            logs: &logs,
        };
        let page = render(&Snapshot::default(), &Metrics::new([]), &parts);
        assert!(page.contains("<h3>think-gpu0</h3>"), "{page}");
        assert!(
            page.contains("ready &lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;done&quot;"),
            "{page}"
        );
        assert!(!page.contains("<script>alert(1)"));
        // The form: a password field without a name (never in a URL), a button that posts
        // with the typed key; one admin key field on the page.
        assert!(page.contains("<input id=\"admin-key\" type=\"password\" autocomplete=\"off\">"));
        assert_eq!(page.matches("id=\"admin-key\"").count(), 1);
        assert!(page.contains("onclick=\"unloadAll()\">Unload all</button>"));
        assert!(page.contains("fetch('/api/v1/models/unload',{method:'POST',headers:h})"));
        assert!(page.contains("'authorization':'Bearer '+k.value"));
        // Without logs, no section.
        let parts = PageParts { logs: &[], ..parts };
        let page = render(&Snapshot::default(), &Metrics::new([]), &parts);
        assert!(!page.contains("Server logs"));
    }
}
