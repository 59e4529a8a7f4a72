#!/usr/bin/env bash
# The release artifacts for an image IMG, as kubebuilder and Helm users make them; no cargo,
# no Go: kubectl (its built-in kustomize) and helm only.
#   release.sh installer IMG OUT        one install manifest (CRDs, namespace, RBAC, the
#                                       Deployment running IMG): `make build-installer`
#   release.sh chart IMG VERSION OUTDIR the chart packaged with IMG as its image and VERSION
#                                       as its version: `make helm-package`
#   release.sh push-chart TGZ REGISTRY  `helm push` to oci://REGISTRY (PLAIN_HTTP=1 for a
#                                       registry without TLS)
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '\033[1m[release]\033[0m %s\n' "$*" >&2; }
die() { say "error: $*"; exit 2; }

# IMG split as kustomize and the chart take it: repository, and a tag or a digest.
split_image() {
  local img=$1
  [[ -n $img && $img != *' '* ]] || die "IMG=$img is not an image reference (registry/name:tag)"
  if [[ $img == *@* ]]; then
    repo=${img%@*} tag='' digest=${img#*@}
  elif [[ ${img##*/} == *:* ]]; then
    repo=${img%:*} tag=${img##*:} digest=''
  else
    repo=$img tag=latest digest=''
  fi
}

installer() {
  local img=$1 out=$2
  split_image "$img"
  # An overlay of config/default that only sets the image; kustomize takes no absolute
  # paths, so it lives under the repository (in .local, which git ignores).
  local overlay
  mkdir -p .local
  overlay=$(mktemp -d .local/installer.XXXXXX)
  trap 'rm -rf "$overlay"' RETURN
  {
    echo "resources:"
    echo "- ../../config/default"
    echo "images:"
    echo "- name: podset-operator"
    echo "  newName: $repo"
    if [[ -n $digest ]]; then echo "  digest: $digest"; else echo "  newTag: \"$tag\""; fi
  } >"$overlay/kustomization.yaml"
  mkdir -p "$(dirname "$out")"
  kubectl kustomize "$overlay" >"$out.tmp"
  mv "$out.tmp" "$out"
  say "wrote $out ($(grep -c '^kind:' "$out") objects, image $img): kubectl apply --server-side -f $out"
}

chart() {
  local img=$1 version=$2 outdir=$3
  split_image "$img"
  [[ -z $digest ]] || die "the chart takes a tag, not a digest: IMG=$img"
  local work
  mkdir -p .local "$outdir"
  work=$(mktemp -d .local/chart.XXXXXX)
  trap 'rm -rf "$work"' RETURN
  cp -r charts/podset-operator "$work/"
  local values="$work/podset-operator/values.yaml"
  # The image block's two keys, as values.yaml spells them (checked: a changed layout fails).
  grep -q '^  repository: podset-operator$' "$values" || die "values.yaml's image.repository moved"
  grep -q '^  tag: ""$' "$values" || die "values.yaml's image.tag moved"
  sed -i "s|^  repository: podset-operator\$|  repository: $repo|; s|^  tag: \"\"\$|  tag: \"$tag\"|" "$values"
  helm package "$work/podset-operator" --version "$version" --app-version "$tag" -d "$outdir" >&2
  say "wrote $outdir/podset-operator-$version.tgz (image $repo:$tag)"
}

push_chart() {
  local tgz=$1 registry=$2
  local flags=()
  [[ -z ${PLAIN_HTTP:-} ]] || flags+=(--plain-http)
  helm push "$tgz" "oci://$registry" "${flags[@]}" >&2
  say "pushed $tgz to oci://$registry"
}

case "${1:-}" in
  installer) installer "${2:?IMG}" "${3:?OUT}" ;;
  chart) chart "${2:?IMG}" "${3:?VERSION}" "${4:?OUTDIR}" ;;
  push-chart) push_chart "${2:?TGZ}" "${3:?REGISTRY}" ;;
  *) die "usage: $0 installer IMG OUT | chart IMG VERSION OUTDIR | push-chart TGZ REGISTRY" ;;
esac
