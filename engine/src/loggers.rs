//! The keys real training loggers write, mapped onto the record of `thdcheck metrics`, so that
//! `thdcheck metrics --logger NAME --expect LOGGED.json` reads the JSON a logger wrote under
//! its own names. A logger is data: a `[loggers.NAME]` table of a stack's profile, the
//! built-in ones in `reader/profiles/*.toml` (each with the upstream file and commit its keys
//! were read from), a user's in the profile file given with `--profile`. `docs/loggers.md` has
//! the formulas and the known bugs of each built-in one.

use anyhow::{Result, bail};

use reader::profile::{LoggedKey, LoggerFacts, Profile};

/// A training logger whose keys are known: a `[loggers.NAME]` table of a profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logger {
    /// The name `--logger` takes (`megatron-bridge`).
    pub name: String,
    /// The profile that declares it (`megatron_bridge`, or a user's).
    pub profile: String,
    /// Its keys and where upstream computes them.
    pub facts: LoggerFacts,
}

impl Logger {
    /// The logger `--logger name` names: one of `profile`'s (the `--profile` given), else one of
    /// the built-in profiles'.
    ///
    /// # Errors
    /// A name that no such profile declares: the message lists the known loggers.
    ///
    /// # Example
    /// ```
    /// use engine::loggers::Logger;
    /// use rules::checks::LoggedKind;
    /// let l = Logger::resolve("bionemo", None)?;
    /// let k = l.find("train/mfu_pct").unwrap();
    /// assert_eq!(k.record.as_deref(), Ok("batch.mfu_pct.useful"));
    /// assert_eq!(LoggedKind::from(k.kind), LoggedKind::Rate);
    /// assert!(l.find("train/nonsense").is_none());
    /// assert!(Logger::resolve("nonsense", None).is_err());
    /// # Ok::<(), anyhow::Error>(())
    /// ```
    pub fn resolve(name: &str, profile: Option<&Profile>) -> Result<Logger> {
        let of = |p: &Profile| {
            p.loggers.get(name).map(|facts| Logger {
                name: name.to_owned(),
                profile: p.name.clone(),
                facts: facts.clone(),
            })
        };
        if let Some(l) = profile.and_then(of) {
            return Ok(l);
        }
        if let Some(l) = Profile::builtins().find_map(|p| of(p)) {
            return Ok(l);
        }
        let mut known = match profile {
            Some(p) if !p.loggers.is_empty() => format!(
                "those of --profile {} ({}), or ",
                p.name,
                p.loggers.keys().map(String::as_str).collect::<Vec<_>>().join(", ")
            ),
            _ => String::new(),
        };
        known.push_str(&format!("the built-in ones ({})", Self::builtin_names().join(", ")));
        bail!(
            "--logger {name:?}: no such logger; expected {known}. A profile file declares its own \
             with [loggers.NAME] (docs/loggers.md) and is given with --profile FILE"
        )
    }

    /// The names of the built-in profiles' loggers, in profile order, each once (a profile that
    /// extends another, `bionemo_esm2`, inherits its base's logger, the same table).
    pub fn builtin_names() -> Vec<&'static str> {
        let mut names: Vec<&'static str> = Vec::new();
        for name in Profile::builtins().flat_map(|p| p.loggers.keys().map(String::as_str)) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names
    }

    /// The entry of `key`, if this logger writes it.
    pub fn find(&self, key: &str) -> Option<&LoggedKey> {
        self.facts.find(key)
    }

    /// The name in reports: each `-`/`_`-separated word capitalised (`MegatronBridge`), as the
    /// reports have always spelled the built-in loggers.
    pub fn title(&self) -> String {
        self.name
            .split(['-', '_'])
            .map(|w| {
                let mut c = w.chars();
                c.next().map(|f| f.to_uppercase().chain(c).collect::<String>()).unwrap_or_default()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--logger`'s help text lists exactly the built-in loggers.
    #[test]
    fn the_help_of_logger_lists_the_builtin_loggers() {
        use clap::CommandFactory;
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            m: crate::args::MetricsArgs,
        }
        let cmd = Wrap::command();
        let arg = cmd.get_arguments().find(|a| a.get_id() == "logger").unwrap();
        let help = arg.get_long_help().or(arg.get_help()).unwrap().to_string();
        for name in Logger::builtin_names() {
            assert!(help.contains(&format!("`{name}`")), "{name} not in {help}");
        }
        assert_eq!(
            Logger::builtin_names(),
            [
                "megatron-bridge",
                "bionemo",
                "open-instruct-dpo",
                "open-instruct-dpo-cache",
                "open-instruct-sft",
                "areal"
            ]
        );
    }

    #[test]
    fn builtin_logger_names_are_unique_and_keep_their_titles() {
        let mut names = Logger::builtin_names();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "a logger name declared twice: {names:?}");
        let title = |n| Logger::resolve(n, None).unwrap().title();
        assert_eq!(title("megatron-bridge"), "MegatronBridge");
        assert_eq!(title("open-instruct-dpo-cache"), "OpenInstructDpoCache");
        assert_eq!(title("areal"), "Areal");
    }
}
