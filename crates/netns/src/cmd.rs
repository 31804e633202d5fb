use std::process::Command;

/// A command that failed: what ran, how it ended, what it said.
#[derive(Debug, thiserror::Error)]
#[error("`{cmd}` {status}: {stderr}")]
pub struct CmdError {
    pub cmd: String,
    pub status: String,
    pub stderr: String,
}

/// Runs a command to completion; its stdout on success.
pub fn run(prog: &str, args: &[&str]) -> Result<String, CmdError> {
    let cmd = format!("{prog} {}", args.join(" "));
    let out = Command::new(prog)
        .args(args)
        .output()
        .map_err(|e| CmdError {
            cmd: cmd.clone(),
            status: "could not start".to_string(),
            stderr: if e.kind() == std::io::ErrorKind::NotFound {
                format!("{prog} is not installed (run `make deps`)")
            } else {
                e.to_string()
            },
        })?;
    if !out.status.success() {
        return Err(CmdError {
            cmd,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
