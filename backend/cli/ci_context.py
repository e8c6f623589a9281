"""Which CI job a result comes from: run id, attempt, commit, branch and job URL, read from the
variables GitHub Actions, GitLab CI, Jenkins and Buildkite set (through
:class:`~ablate.backend.config.CiEnvironment`), as ``ci_*`` provenance entries."""

from __future__ import annotations

from dataclasses import dataclass, fields

from ablate.backend.config import CiEnvironment


@dataclass(frozen=True)
class _CiJob:
    """One CI job's identity as its system gives it; :meth:`entries` names the parts as provenance."""

    ci: str
    run_id: str = ""
    run_attempt: str = ""
    job_id: str = ""
    commit: str = ""
    branch: str = ""
    job_url: str = ""
    job: str = ""
    pipeline: str = ""
    repository: str = ""

    def entries(self) -> dict[str, str]:
        """``ci`` and a ``ci_<part>`` entry for each other part the CI set, in this class's order."""
        named = {f.name: getattr(self, f.name) for f in fields(self)}
        return {(k if k == "ci" else f"ci_{k}"): v for k, v in named.items() if v}


def _github(e: CiEnvironment) -> _CiJob:
    base = f"{e.github_server_url or 'https://github.com'}/{e.github_repository}"
    url = f"{base}/actions/runs/{e.github_run_id}" if e.github_repository and e.github_run_id else ""
    if url and e.github_run_attempt:
        url += f"/attempts/{e.github_run_attempt}"
    return _CiJob(
        "github-actions",
        run_id=e.github_run_id,
        run_attempt=e.github_run_attempt,
        commit=e.github_sha,
        # On a pull request GITHUB_REF_NAME is "<n>/merge"; the head branch is what people know.
        branch=e.github_head_ref or e.github_ref_name,
        job_url=url,
        job=e.github_job,
        pipeline=e.github_workflow,
        repository=e.github_repository,
    )


def _gitlab(e: CiEnvironment) -> _CiJob:
    return _CiJob(
        "gitlab-ci",
        run_id=e.ci_pipeline_id,
        job_id=e.ci_job_id,  # a retried job gets a new id: it stands for the attempt
        commit=e.ci_commit_sha,
        branch=e.ci_commit_ref_name,
        job_url=e.ci_job_url,
        job=e.ci_job_name,
        repository=e.ci_project_path,
    )


def _jenkins(e: CiEnvironment) -> _CiJob:
    return _CiJob(
        "jenkins",
        run_id=e.build_number,
        commit=e.git_commit,
        branch=e.branch_name or e.git_branch,
        job_url=e.build_url,
        job=e.job_name,
    )


def _buildkite(e: CiEnvironment) -> _CiJob:
    retries = e.buildkite_retry_count
    url = e.buildkite_build_url + (
        f"#{e.buildkite_job_id}" if e.buildkite_build_url and e.buildkite_job_id else ""
    )
    return _CiJob(
        "buildkite",
        run_id=e.buildkite_build_number or e.buildkite_build_id,
        run_attempt=str(int(retries) + 1) if retries.isdigit() else "",
        commit=e.buildkite_commit,
        branch=e.buildkite_branch,
        job_url=url,
        job=e.buildkite_label,
        pipeline=e.buildkite_pipeline_slug,
    )


def ci_provenance(env: CiEnvironment | None = None) -> dict[str, str]:
    """The CI job's identity as provenance entries (only those the CI set); empty outside CI."""
    e = env or CiEnvironment()
    if e.github_actions.lower() == "true":
        found = _github(e)
    elif e.gitlab_ci.lower() == "true":
        found = _gitlab(e)
    elif e.buildkite.lower() == "true":
        found = _buildkite(e)
    elif e.jenkins_url:
        found = _jenkins(e)
    else:
        return {}
    return found.entries()
