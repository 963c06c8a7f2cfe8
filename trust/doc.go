// Package trust owns who may write what: the writers' signing keys (an OpenSSH private key, or
// one made at first start, optionally with an SSH certificate beside it), signatures in git's
// SSH signature format (SSHSIG, namespace "git", as `git commit -S` with gpg.format=ssh makes
// them, so `git verify-commit` checks them), and the reviewed `.gitbroker/allowed_signers` file
// (git's allowed_signers format, cert-authority lines included) that names the principals:
// node:<name>, renderer, recorder and people.
//
// It speaks no git: gitsync asks a Signer to sign the commit it built, and the renderer's
// verification asks an AllowedSigners which principals a commit's signature proves.
package trust
