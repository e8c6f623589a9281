"""Which CI job a result comes from: run id, attempt, commit, branch and job URL, read from the
variables GitHub Actions, GitLab CI, Jenkins and Buildkite set (through
:class:`~ablate.backend.config.CiEnvironment`), as ``ci_*`` provenance entries."""

from __future__ import annotations

from ablate.backend.config import CiEnvironment


def _github(e: CiEnvironment) -> dict[str, str]:
    base = f"{e.github_server_url or 'https://github.com'}/{e.github_repository}"
    url = f"{base}/actions/runs/{e.github_run_id}" if e.github_repository and e.github_run_id else ""
    if url and e.github_run_attempt:
        url += f"/attempts/{e.github_run_attempt}"
    return {
        "ci": "github-actions",
        "ci_run_id": e.github_run_id,
        "ci_run_attempt": e.github_run_attempt,
        "ci_commit": e.github_sha,
        # On a pull request GITHUB_REF_NAME is "<n>/merge"; the head branch is what people know.
        "ci_branch": e.github_head_ref or e.github_ref_name,
        "ci_job_url": url,
        "ci_job": e.github_job,
        "ci_pipeline": e.github_workflow,
        "ci_repository": e.github_repository,
    }


def _gitlab(e: CiEnvironment) -> dict[str, str]:
    return {
        "ci": "gitlab-ci",
        "ci_run_id": e.ci_pipeline_id,
        "ci_job_id": e.ci_job_id,  # a retried job gets a new id: it stands for the attempt
        "ci_commit": e.ci_commit_sha,
        "ci_branch": e.ci_commit_ref_name,
        "ci_job_url": e.ci_job_url,
        "ci_job": e.ci_job_name,
        "ci_repository": e.ci_project_path,
    }


def _jenkins(e: CiEnvironment) -> dict[str, str]:
    return {
        "ci": "jenkins",
        "ci_run_id": e.build_number,
        "ci_commit": e.git_commit,
        "ci_branch": e.branch_name or e.git_branch,
        "ci_job_url": e.build_url,
        "ci_job": e.job_name,
    }


def _buildkite(e: CiEnvironment) -> dict[str, str]:
    retries = e.buildkite_retry_count
    url = e.buildkite_build_url + (
        f"#{e.buildkite_job_id}" if e.buildkite_build_url and e.buildkite_job_id else ""
    )
    return {
        "ci": "buildkite",
        "ci_run_id": e.buildkite_build_number or e.buildkite_build_id,
        "ci_run_attempt": str(int(retries) + 1) if retries.isdigit() else "",
        "ci_commit": e.buildkite_commit,
        "ci_branch": e.buildkite_branch,
        "ci_job_url": url,
        "ci_job": e.buildkite_label,
        "ci_pipeline": e.buildkite_pipeline_slug,
    }


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
    return {k: v for k, v in found.items() if v}
