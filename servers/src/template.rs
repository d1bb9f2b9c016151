//! Placeholders in commands and environment values: `{port}`, `{gpus}`, `{name}`, `{model}`.
//!
//! One configuration then serves every port and GPU set the pool hands out, e.g.
//! `["vllm", "serve", "{model}", "--port", "{port}"]`.

/// The values placeholders expand to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vars {
    /// `{port}`: the port the server listens on (inside a container: the container port).
    pub port: u16,
    /// `{host_port}`: the port on the host (equals `port` for a process).
    pub host_port: u16,
    /// `{gpus}`: the GPU indices, comma separated (empty when none).
    pub gpus: Vec<u32>,
    /// `{name}`: the server's name.
    pub name: String,
    /// `{model}`: the model id (the pool's model id; the name when unset).
    pub model: String,
}

impl Vars {
    /// `gpus` as `0,1`.
    pub fn gpu_list(&self) -> String {
        self.gpus
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `s` with every known placeholder replaced; unknown `{...}` are left alone (JSON in an
    /// argument stays intact).
    pub fn expand(&self, s: &str) -> String {
        if !s.contains('{') {
            return s.to_owned();
        }
        s.replace("{port}", &self.port.to_string())
            .replace("{host_port}", &self.host_port.to_string())
            .replace("{gpus}", &self.gpu_list())
            .replace("{name}", &self.name)
            .replace("{model}", &self.model)
    }

    /// Every element expanded.
    pub fn expand_all(&self, v: &[String]) -> Vec<String> {
        v.iter().map(|s| self.expand(s)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_known_placeholders_only() {
        let v = Vars {
            port: 8001,
            host_port: 18001,
            gpus: vec![0, 2],
            name: "think".into(),
            model: "qwen".into(),
        };
        assert_eq!(v.expand("--port={port}"), "--port=8001");
        assert_eq!(v.expand("{host_port}"), "18001");
        assert_eq!(v.expand("{gpus}"), "0,2");
        assert_eq!(v.expand("{name}/{model}"), "think/qwen");
        assert_eq!(v.expand(r#"{"a":1}"#), r#"{"a":1}"#);
        assert_eq!(Vars::default().gpu_list(), "");
    }
}
