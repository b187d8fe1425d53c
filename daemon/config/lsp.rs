//! Language servers (`[lsp.KEY]`): the program each language's `/lsp/{lang}` runs, and whether
//! it can be found, the way `execvp` would find it.

use super::assistants::program_available;

/// `[lsp.KEY]`: the language server of one language. Its command is an argument array, never
/// split on spaces and never run through a shell; the server speaks the LSP base protocol on
/// its stdin and stdout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LanguageServer {
    /// How it starts; the first element is the program (at least one element).
    pub command: Vec<String>,
}

impl LanguageServer {
    /// Whether the program is found (see [`program_available`]); `Err` says why not.
    pub fn availability(&self) -> Result<(), String> {
        let program = self.command.first().map(String::as_str).unwrap_or_default();
        program_available(program)
    }
}
