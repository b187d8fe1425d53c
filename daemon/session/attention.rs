//! The session's attention: its state (working, waiting, idle, exited), since when and why,
//! decided from what the agent reported, what the screen says and what the terminal says, in
//! that order of trust (README, "Attention"), and the one timer that wakes the actor when a
//! rule's time runs out. On the output path it costs a timestamp: the timer is armed from the
//! loop, and moved only when it fires.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant, SystemTime};

use tokio::time::Sleep;

use super::process::ExitInfo;
use crate::attention::report::Report;
use crate::attention::screen::Reading;
use crate::attention::state::{Choice, SessionState, Source, State};
use crate::config::AttentionConfig;
use crate::upgrade::image::AttentionImage;

/// Output this soon after a viewer's keys is their echo (or a command's quick answer), not the
/// program working.
const ECHO: Duration = Duration::from_millis(150);

/// How long `working` from the screen outlasts its last match: the gaps between an agent's
/// steps, when its spinner line is gone for a moment.
const STICKY: Duration = Duration::from_secs(3);

/// Programs whose own prompt is a shell's (for the reason an idle session gives).
const SHELLS: [&str; 13] = [
    "bash", "sh", "zsh", "fish", "dash", "ksh", "mksh", "tcsh", "csh", "ash", "nu", "elvish",
    "xonsh",
];

/// The program in the terminal's foreground, as the quiet check finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Foreground {
    /// Whether it is the session's program itself (its process group).
    pub(super) own: bool,
    /// Its name (`/proc/PID/comm`).
    pub(super) program: String,
}

/// What the terminal rule says.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Terminal {
    /// The program is starting: no quiet check yet.
    Starting,
    /// Output within `quiet`.
    Printing,
    /// Quiet, with the session's program in the foreground.
    Idle {
        /// Whether that program is a shell.
        shell: bool,
    },
    /// Quiet, another program in the foreground, the cursor after a prompt.
    Prompt {
        /// The foreground program.
        program: String,
        /// The cursor's line.
        line: String,
    },
    /// Quiet, another program in the foreground.
    Running {
        /// The foreground program.
        program: String,
    },
}

/// A report that holds: until another, a viewer's keys, or the screen changing `hook_grace`
/// after it.
#[derive(Debug, Clone)]
struct Held {
    report: Report,
    at: Instant,
}

/// What deciding again changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Changed {
    /// Nothing anyone sees.
    Nothing,
    /// The same state with another reason, source or choices.
    Detail,
    /// A new state; this is the one it left.
    State(State),
}

/// The session's attention.
pub(super) struct Attention {
    /// What everyone sees.
    now: SessionState,
    /// The agent's report, while it holds.
    hook: Option<Held>,
    /// The screen's latest reading.
    reading: Option<Reading>,
    /// When the screen last matched a `working` pattern.
    working_seen: Option<Instant>,
    /// The terminal rule's verdict.
    terminal: Terminal,
    /// The last output that counts (not an echo).
    active_at: Instant,
    /// The last keys a viewer typed.
    input_at: Option<Instant>,
    /// Output or keys came since the last quiet check.
    quiet_due: bool,
    quiet: Duration,
    grace: Duration,
    /// The assistant's display name, for reasons.
    name: String,
    /// The timer, made on first use (it needs the runtime), moved only when it has to.
    timer: Option<Pin<Box<Sleep>>>,
    /// The deadline the timer is set to, while one is needed.
    armed: Option<Instant>,
}

impl Attention {
    /// A session whose program starts now, run as assistant `name`.
    pub(super) fn new(cfg: &AttentionConfig, name: &str) -> Self {
        Attention {
            now: SessionState::starting("starting"),
            hook: None,
            reading: None,
            working_seen: None,
            terminal: Terminal::Starting,
            active_at: Instant::now(),
            input_at: None,
            quiet_due: true,
            quiet: cfg.quiet,
            grace: cfg.hook_grace,
            name: name.to_owned(),
            timer: None,
            armed: None,
        }
    }

    /// A session adopted in a live upgrade, as its image left it: the same state, since, reason,
    /// source and choices, and a report that held still holds (the rules take over from there
    /// as the session goes on). An older image without one starts as a new session does.
    pub(super) fn adopted(
        cfg: &AttentionConfig,
        name: &str,
        image: Option<&AttentionImage>,
    ) -> Self {
        let mut me = Self::new(cfg, name);
        let Some(image) = image else {
            return me;
        };
        me.now = SessionState {
            state: image.state,
            since: std::time::UNIX_EPOCH + Duration::from_millis(image.since_unix_ms),
            reason: image.reason.clone(),
            source: image.source,
            choices: image.choices.clone(),
        };
        me.hook = image.hook.as_ref().map(|(state, reason)| Held {
            report: Report {
                state: *state,
                reason: reason.clone(),
            },
            at: Instant::now(),
        });
        me.terminal = match image.state {
            State::Idle => Terminal::Idle { shell: false },
            _ => Terminal::Starting,
        };
        me
    }

    /// Its part of a live upgrade's image (the token is the gate's).
    pub(super) fn image(&self, token: &str) -> AttentionImage {
        AttentionImage {
            state: self.now.state,
            since_unix_ms: self.now.since_ms(),
            reason: self.now.reason.clone(),
            source: self.now.source,
            choices: self.now.choices.clone(),
            token: token.to_owned(),
            hook: self
                .hook
                .as_ref()
                .map(|h| (h.report.state, h.report.reason.clone())),
        }
    }

    /// The state as everyone sees it.
    pub(super) fn now(&self) -> &SessionState {
        &self.now
    }

    /// Output was published at `at`: on the output path, a timestamp and a comparison; the
    /// state is decided again only when the terminal rule's verdict changes.
    pub(super) fn output(&mut self, at: Instant) -> Changed {
        if self.now.state == State::Exited
            || self
                .input_at
                .is_some_and(|typed| at.saturating_duration_since(typed) < ECHO)
        {
            return Changed::Nothing;
        }
        self.active_at = at;
        self.quiet_due = true;
        if matches!(self.terminal, Terminal::Printing) {
            return Changed::Nothing;
        }
        self.terminal = Terminal::Printing;
        self.decide(at)
    }

    /// A viewer typed at `at`: the user answered, so a report no longer holds.
    pub(super) fn typed(&mut self, at: Instant) -> Changed {
        self.input_at = Some(at);
        self.quiet_due = true;
        self.armed = None;
        match self.hook.take() {
            Some(_) => self.decide(at),
            None => Changed::Nothing,
        }
    }

    /// The agent reported `report` at `at`.
    pub(super) fn reported(&mut self, report: Report, at: Instant) -> Changed {
        if self.now.state == State::Exited {
            return Changed::Nothing;
        }
        self.hook = Some(Held { report, at });
        self.armed = None;
        self.decide(at)
    }

    /// The screen changed, as `reading` says. A report made more than `hook_grace` before it
    /// no longer holds.
    pub(super) fn read(&mut self, reading: Reading) -> Changed {
        let at = reading.at;
        if self
            .hook
            .as_ref()
            .is_some_and(|h| at.saturating_duration_since(h.at) > self.grace)
        {
            self.hook = None;
        }
        if reading
            .verdict
            .as_ref()
            .is_some_and(|v| v.state == State::Working)
        {
            self.working_seen = Some(at);
        }
        self.reading = Some(reading);
        self.armed = None;
        self.decide(Instant::now())
    }

    /// The timer fired at `now`: a quiet check if one is due (`foreground` says who is in the
    /// terminal's foreground), and a sticky `working` that may have run out.
    pub(super) fn timer_fired(
        &mut self,
        now: Instant,
        foreground: impl FnOnce() -> Option<Foreground>,
    ) -> Changed {
        self.armed = None;
        if self.quiet_due && now >= self.last_activity() + self.quiet {
            self.quiet_due = false;
            let prompt = self.reading.as_ref().and_then(|r| r.prompt.clone());
            self.terminal = match foreground() {
                None => Terminal::Idle { shell: false },
                Some(f) if f.own => Terminal::Idle {
                    shell: SHELLS.contains(&f.program.as_str()),
                },
                Some(f) => match prompt {
                    Some(line) => Terminal::Prompt {
                        program: f.program,
                        line,
                    },
                    None => Terminal::Running { program: f.program },
                },
            };
        }
        self.decide(now)
    }

    /// The program exited as `exit` says.
    pub(super) fn exited(&mut self, exit: &ExitInfo) -> Changed {
        let reason = match &exit.signal {
            Some(signal) => format!("killed by {signal}"),
            None => format!("exited with code {}", exit.code),
        };
        self.hook = None;
        self.armed = None;
        self.apply(State::Exited, reason, Source::Exit, Vec::new())
    }

    /// A new program started in the session (a YOLO toggle's): working again.
    pub(super) fn restarted(&mut self, at: Instant) -> Changed {
        self.hook = None;
        self.terminal = Terminal::Starting;
        self.active_at = at;
        self.quiet_due = true;
        self.armed = None;
        self.apply(
            State::Working,
            "restarting".to_owned(),
            Source::Terminal,
            Vec::new(),
        )
    }

    /// Resolves when the timer is due; pending while none is needed. Arms (or moves) the timer
    /// only when it has no deadline: while output keeps coming, that is once per `quiet`.
    pub(super) fn wait(&mut self) -> impl Future<Output = ()> + '_ {
        if self.armed.is_none() {
            self.armed = self.deadline();
            if let Some(at) = self.armed {
                let at = tokio::time::Instant::from_std(at);
                match &mut self.timer {
                    Some(timer) => timer.as_mut().reset(at),
                    None => self.timer = Some(Box::pin(tokio::time::sleep_until(at))),
                }
            }
        }
        let timer = self.armed.and(self.timer.as_mut());
        async move {
            match timer {
                Some(timer) => timer.as_mut().await,
                None => std::future::pending().await,
            }
        }
    }

    fn last_activity(&self) -> Instant {
        self.input_at
            .map_or(self.active_at, |typed| typed.max(self.active_at))
    }

    /// When a rule's time runs out next: the quiet check, or a sticky `working` ending.
    fn deadline(&self) -> Option<Instant> {
        if self.now.state == State::Exited {
            return None;
        }
        let quiet = self.quiet_due.then(|| self.last_activity() + self.quiet);
        let screen_says_working = self
            .reading
            .as_ref()
            .and_then(|r| r.verdict.as_ref())
            .is_some_and(|v| v.state == State::Working);
        let sticky = self
            .working_seen
            .filter(|_| {
                self.now.state == State::Working
                    && self.now.source == Source::Screen
                    && !screen_says_working
            })
            .map(|seen| seen + STICKY);
        match (quiet, sticky) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Decides the state again from every source, most trusted first.
    fn decide(&mut self, now: Instant) -> Changed {
        if self.now.state == State::Exited {
            return Changed::Nothing;
        }
        let screen_choices = || {
            self.reading
                .as_ref()
                .map(|r| r.choices.clone())
                .unwrap_or_default()
        };
        let working = || format!("{} is working", self.name);
        let (state, reason, source, choices) = if let Some(held) = &self.hook {
            let r = &held.report;
            let reason = match (r.reason.is_empty(), r.state) {
                (false, _) => r.reason.clone(),
                (true, State::Waiting) => format!("{} needs you", self.name),
                (true, State::Idle) => format!("{} is done", self.name),
                (true, _) => working(),
            };
            let choices = match r.state {
                State::Waiting => screen_choices(),
                _ => Vec::new(),
            };
            (r.state, reason, Source::Hook, choices)
        } else if let Some(verdict) = self.reading.as_ref().and_then(|r| r.verdict.as_ref()) {
            match verdict.state {
                State::Waiting => (
                    State::Waiting,
                    format!("{} asks: {}", self.name, verdict.question),
                    Source::Screen,
                    screen_choices(),
                ),
                _ => (State::Working, working(), Source::Screen, Vec::new()),
            }
        } else if self.working_seen.is_some_and(|seen| now < seen + STICKY) {
            (State::Working, working(), Source::Screen, Vec::new())
        } else {
            let quiet = spoken(self.quiet);
            match &self.terminal {
                Terminal::Starting => (
                    State::Working,
                    "starting".to_owned(),
                    Source::Terminal,
                    Vec::new(),
                ),
                Terminal::Printing => (
                    State::Working,
                    "printing".to_owned(),
                    Source::Terminal,
                    Vec::new(),
                ),
                Terminal::Idle { shell: true } => (
                    State::Idle,
                    format!("quiet for {quiet} at a shell prompt"),
                    Source::Terminal,
                    Vec::new(),
                ),
                Terminal::Idle { shell: false } => (
                    State::Idle,
                    format!("quiet for {quiet}"),
                    Source::Terminal,
                    Vec::new(),
                ),
                Terminal::Prompt { program, line } => (
                    State::Waiting,
                    crate::attention::state::reason_from(&format!("{program} asks: {line}")),
                    Source::Terminal,
                    screen_choices(),
                ),
                Terminal::Running { program } => (
                    State::Working,
                    format!("running {program}"),
                    Source::Terminal,
                    Vec::new(),
                ),
            }
        };
        self.apply(state, reason, source, choices)
    }

    fn apply(
        &mut self,
        state: State,
        reason: String,
        source: Source,
        choices: Vec<Choice>,
    ) -> Changed {
        let now = &mut self.now;
        if state == now.state {
            if reason == now.reason && source == now.source && choices == now.choices {
                return Changed::Nothing;
            }
            now.reason = reason;
            now.source = source;
            now.choices = choices;
            return Changed::Detail;
        }
        let from = now.state;
        *now = SessionState {
            state,
            since: SystemTime::now(),
            reason,
            source,
            choices,
        };
        // A new deadline may apply (a sticky `working` began, or the exit ended every rule).
        self.armed = None;
        Changed::State(from)
    }
}

/// A duration as a reason says it: "3 s", "1500 ms", "2 min".
fn spoken(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        _ if ms % 60_000 == 0 && ms >= 60_000 => format!("{} min", ms / 60_000),
        _ if ms % 1000 == 0 => format!("{} s", ms / 1000),
        _ => format!("{ms} ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::screen::Verdict;

    fn cfg() -> AttentionConfig {
        AttentionConfig {
            quiet: Duration::from_secs(3),
            hook_grace: Duration::from_secs(1),
            state_rows: 15,
            hook_rate: 20,
        }
    }

    fn reading(at: Instant, verdict: Option<State>, prompt: Option<&str>) -> Reading {
        Reading {
            at,
            verdict: verdict.map(|state| Verdict {
                state,
                question: "Do you want to proceed?".into(),
            }),
            prompt: prompt.map(str::to_owned),
            choices: Vec::new(),
        }
    }

    fn shell() -> Option<Foreground> {
        Some(Foreground {
            own: true,
            program: "bash".into(),
        })
    }

    fn report(state: State, reason: &str) -> Report {
        Report {
            state,
            reason: reason.into(),
        }
    }

    #[test]
    fn the_terminal_rule_output_then_quiet() {
        let mut a = Attention::new(&cfg(), "Shell");
        let t0 = Instant::now();
        assert_eq!(a.now().state, State::Working);
        assert_eq!(a.now().reason, "starting");
        // Not yet quiet: nothing changes.
        assert_eq!(
            a.timer_fired(t0 + Duration::from_secs(1), shell),
            Changed::Nothing
        );
        let later = t0 + Duration::from_secs(4);
        assert_eq!(a.timer_fired(later, shell), Changed::State(State::Working));
        assert_eq!(a.now().state, State::Idle);
        assert_eq!(a.now().reason, "quiet for 3 s at a shell prompt");
        assert_eq!(a.now().source, Source::Terminal);
        // Output: working again, at once; the first chunk only decides.
        let out = later + Duration::from_secs(1);
        assert_eq!(a.output(out), Changed::State(State::Idle));
        assert_eq!(a.output(out), Changed::Nothing);
        assert_eq!(a.now().reason, "printing");
    }

    #[test]
    fn echo_of_keys_is_not_work_and_a_foreground_program_waits_or_works() {
        let mut a = Attention::new(&cfg(), "Shell");
        let t0 = Instant::now();
        a.timer_fired(t0 + Duration::from_secs(4), shell);
        assert_eq!(a.now().state, State::Idle);
        let typed = t0 + Duration::from_secs(5);
        a.typed(typed);
        assert_eq!(
            a.output(typed + Duration::from_millis(20)),
            Changed::Nothing,
            "an echo"
        );
        assert_eq!(a.now().state, State::Idle);
        // `sleep` runs, silent: working once the quiet check finds it in the foreground.
        let sleep = || {
            Some(Foreground {
                own: false,
                program: "sleep".into(),
            })
        };
        a.timer_fired(typed + Duration::from_secs(3), sleep);
        assert_eq!(
            (a.now().state, a.now().reason.as_str()),
            (State::Working, "running sleep")
        );
        // A program asking something: waiting.
        a.read(reading(
            typed + Duration::from_secs(4),
            None,
            Some("Password:"),
        ));
        a.typed(typed + Duration::from_secs(4));
        let sudo = || {
            Some(Foreground {
                own: false,
                program: "sudo".into(),
            })
        };
        a.timer_fired(typed + Duration::from_secs(8), sudo);
        assert_eq!(
            (a.now().state, a.now().reason.as_str()),
            (State::Waiting, "sudo asks: Password:")
        );
    }

    #[test]
    fn the_screen_wins_over_the_terminal_and_working_is_sticky() {
        let mut a = Attention::new(&cfg(), "Claude");
        let t0 = Instant::now();
        a.read(reading(t0, Some(State::Working), None));
        assert_eq!(
            (a.now().state, a.now().source),
            (State::Working, Source::Screen)
        );
        assert_eq!(a.now().reason, "Claude is working");
        // The spinner is gone for a moment: still working, until 3 s after its last match.
        a.read(reading(t0 + Duration::from_millis(500), None, None));
        assert_eq!(a.now().state, State::Working);
        assert_eq!(
            a.deadline(),
            Some(t0 + STICKY).min(Some(a.last_activity() + a.quiet))
        );
        a.read(reading(
            t0 + Duration::from_millis(600),
            Some(State::Waiting),
            None,
        ));
        assert_eq!(
            (a.now().state, a.now().reason.as_str()),
            (State::Waiting, "Claude asks: Do you want to proceed?")
        );
        // Quiet at its own prompt (the terminal says idle) does not end a waiting screen.
        a.timer_fired(t0 + Duration::from_secs(10), || {
            Some(Foreground {
                own: true,
                program: "claude".into(),
            })
        });
        assert_eq!(a.now().state, State::Waiting);
    }

    #[test]
    fn a_report_holds_until_keys_or_a_screen_change_after_the_grace() {
        let mut a = Attention::new(&cfg(), "Claude");
        let t0 = Instant::now();
        a.read(reading(t0, Some(State::Working), None));
        let r = a.reported(report(State::Waiting, "Claude wants to run: ls"), t0);
        assert_eq!(r, Changed::State(State::Working));
        assert_eq!(a.now().source, Source::Hook);
        // The redraw that comes with it does not end it.
        a.read(reading(
            t0 + Duration::from_millis(300),
            Some(State::Working),
            None,
        ));
        assert_eq!(a.now().state, State::Waiting);
        // A change later does.
        a.read(reading(
            t0 + Duration::from_secs(2),
            Some(State::Working),
            None,
        ));
        assert_eq!(
            (a.now().state, a.now().source),
            (State::Working, Source::Screen)
        );
        // Keys end it too.
        a.reported(report(State::Idle, ""), t0 + Duration::from_secs(3));
        assert_eq!(
            (a.now().state, a.now().reason.as_str()),
            (State::Idle, "Claude is done")
        );
        a.typed(t0 + Duration::from_secs(4));
        assert_eq!(a.now().source, Source::Screen);
    }

    #[test]
    fn exit_and_restart() {
        let mut a = Attention::new(&cfg(), "Claude");
        a.reported(report(State::Waiting, "x"), Instant::now());
        assert_eq!(
            a.exited(&ExitInfo::exited(3)),
            Changed::State(State::Waiting)
        );
        assert_eq!(
            (a.now().state, a.now().reason.as_str(), a.now().source),
            (State::Exited, "exited with code 3", Source::Exit)
        );
        assert_eq!(a.deadline(), None);
        // Nothing moves an exited session but a restart.
        assert_eq!(
            a.reported(report(State::Idle, ""), Instant::now()),
            Changed::Nothing
        );
        assert_eq!(a.output(Instant::now()), Changed::Nothing);
        a.restarted(Instant::now());
        assert_eq!(a.now().state, State::Working);
        let killed = ExitInfo::killed(15);
        a.exited(&killed);
        assert_eq!(a.now().reason, "killed by SIGTERM");
    }

    #[test]
    fn an_image_brings_back_the_state_and_the_report() {
        let mut a = Attention::new(&cfg(), "Claude");
        a.reported(
            report(State::Waiting, "Claude wants to run: ls"),
            Instant::now(),
        );
        let image = a.image("tok");
        let b = Attention::adopted(&cfg(), "Claude", Some(&image));
        assert_eq!(b.now().state, State::Waiting);
        assert_eq!(b.now().reason, "Claude wants to run: ls");
        assert_eq!(b.now().since_ms(), a.now().since_ms());
        assert_eq!(b.now().source, Source::Hook);
        assert!(b.hook.is_some());
        let fresh = Attention::adopted(&cfg(), "Claude", None);
        assert_eq!(fresh.now().state, State::Working);
    }

    #[test]
    fn durations_as_spoken() {
        assert_eq!(spoken(Duration::from_secs(3)), "3 s");
        assert_eq!(spoken(Duration::from_millis(1500)), "1500 ms");
        assert_eq!(spoken(Duration::from_secs(120)), "2 min");
    }
}
