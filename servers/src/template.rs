//! Placeholders in commands and environment values: `{port}`, `{gpus}`, `{name}`, `{model}`,
//! and for a model split over several GPUs `{tensor_split}` and `{tp}`.
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
    /// `{tensor_split}`: MB of the model on each of `gpus`, comma separated (llama-server's
    /// `--tensor-split` takes them as proportions); empty: equal shares (`1,1`, or `1` for one
    /// GPU or none).
    pub tensor_split: Vec<u64>,
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

    /// `{tensor_split}`: the shares as written, else one equal share per GPU.
    pub fn tensor_split(&self) -> String {
        if self.tensor_split.len() == self.gpus.len().max(1) && !self.tensor_split.is_empty() {
            return self
                .tensor_split
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(",");
        }
        vec!["1"; self.gpus.len().max(1)].join(",")
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
            .replace("{tensor_split}", &self.tensor_split())
            // Tensor parallelism over the server's GPUs (vLLM's --tensor-parallel-size).
            .replace("{tp}", &self.gpus.len().max(1).to_string())
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
        let mut v = Vars {
            port: 8001,
            host_port: 18001,
            gpus: vec![0, 2],
            name: "think".into(),
            model: "qwen".into(),
            tensor_split: Vec::new(),
        };
        assert_eq!(v.expand("--port={port}"), "--port=8001");
        assert_eq!(v.expand("{host_port}"), "18001");
        assert_eq!(v.expand("{gpus}"), "0,2");
        assert_eq!(v.expand("{name}/{model}"), "think/qwen");
        assert_eq!(v.expand(r#"{"a":1}"#), r#"{"a":1}"#);
        assert_eq!(Vars::default().gpu_list(), "");
        // One model over two GPUs: equal shares until the pool places it, then its MB.
        assert_eq!(
            v.expand("--tensor-split {tensor_split} -tp {tp}"),
            "--tensor-split 1,1 -tp 2"
        );
        v.tensor_split = vec![30_000, 10_000];
        assert_eq!(v.expand("{tensor_split}"), "30000,10000");
        assert_eq!(Vars::default().expand("{tensor_split} {tp}"), "1 1");
    }
}
