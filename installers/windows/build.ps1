<#
.SYNOPSIS
Build Draftlight for Windows from a clean checkout: a PyInstaller one-folder bundle and an Inno Setup
installer, dist\Draftlight-<version>-windows-x64[-cuda]-setup.exe.

.DESCRIPTION
    powershell -ExecutionPolicy Bypass -File installers\windows\build.ps1 [-Flavour cpu|cuda|native]

Flavour of llama.cpp (also $env:DRAFTLIGHT_FLAVOUR); llama-cpp-python is compiled from source, so
Visual Studio 2022 (C++ workload) and CMake are needed:
  cpu     (default) portable x64: GGML_NATIVE=OFF with AVX2/FMA/F16C/BMI2 (Intel Haswell 2013+,
          AMD 2015+). GGML_OPENMP=OFF: ggml's own thread pool, so the installer does not depend on
          the OpenMP runtime (vcomp140.dll) being on the user's machine.
  cuda    the cpu flags plus GGML_CUDA=on. Needs the CUDA toolkit (CUDA_PATH set, nvcc on PATH);
          the CUDA runtime DLLs (cudart, cublas) are bundled from there. Users need an NVIDIA driver.
  native  llama-cpp-python's default build for this machine's CPU; reuses pip's wheel cache. Not for release.
$env:DRAFTLIGHT_CMAKE_ARGS replaces the flavour's CMake flags entirely.

Other settings: $env:PYTHON (interpreter for the build venv, >= 3.11; default "py -3.11" when the
launcher exists, else "python"); $env:DRAFTLIGHT_VENV (default %LOCALAPPDATA%\draftlight-build\venv-<flavour>,
kept between runs: llama-cpp-python is recompiled only when its flags change); -NoSelfTest;
-NoInstaller (bundle only, no Inno Setup needed).
Inno Setup 6.3 or newer: ISCC.exe on PATH or in its default folder (choco install innosetup).
#>
param(
    [ValidateSet("cpu", "cuda", "native")]
    [string]$Flavour = $(if ($env:DRAFTLIGHT_FLAVOUR) { $env:DRAFTLIGHT_FLAVOUR } else { "cpu" }),
    [switch]$NoSelfTest,
    [switch]$NoInstaller
)
$ErrorActionPreference = "Stop"
Set-Location (Resolve-Path (Join-Path $PSScriptRoot "..\.."))
$Root = (Get-Location).Path

function Invoke-Native {
    # PowerShell does not stop on a failing program by itself: check every exit code. A plain
    # function (no param block), so arguments such as -m reach the program untouched.
    $Exe, $Rest = $args
    & $Exe @Rest
    if ($LASTEXITCODE -ne 0) { throw "$Exe $($Rest -join ' ') failed with exit code $LASTEXITCODE" }
}

$LlamaVersion = "0.3.36"
$PortableCpu = "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_OPENMP=OFF"
switch ($Flavour) {
    "cpu"    { $CmakeFlags = $PortableCpu; $Suffix = "" }
    "cuda"   { $CmakeFlags = "$PortableCpu -DGGML_CUDA=on"; $Suffix = "-cuda" }
    "native" { $CmakeFlags = ""; $Suffix = "-native" }
}
if ($env:DRAFTLIGHT_CMAKE_ARGS) { $CmakeFlags = $env:DRAFTLIGHT_CMAKE_ARGS }

# The interpreter that makes the build venv.
if ($env:PYTHON) { $Python = @($env:PYTHON) }
elseif (Get-Command py -ErrorAction SilentlyContinue) { $Python = @("py", "-3.11") }
else { $Python = @("python") }
$PyExe = $Python[0]
$PyArgs = @($Python | Select-Object -Skip 1)
& $PyExe @PyArgs -c "import sys; sys.exit(sys.version_info < (3, 11))"
if ($LASTEXITCODE -ne 0) { throw "Draftlight needs Python 3.11 or newer (set `$env:PYTHON)" }
$Version = & $PyExe @PyArgs -c "import tomllib; print(tomllib.load(open('pyproject.toml', 'rb'))['project']['version'])"
$Name = "Draftlight-$Version-windows-x64$Suffix"
Write-Host "==> Draftlight $Version, flavour $Flavour (CMAKE_ARGS='$CmakeFlags')"

# 1. A build environment of its own (kept between runs).
$Venv = if ($env:DRAFTLIGHT_VENV) { $env:DRAFTLIGHT_VENV } else { Join-Path $env:LOCALAPPDATA "draftlight-build\venv-$Flavour" }
if (-not (Test-Path (Join-Path $Venv "Scripts\python.exe"))) { Invoke-Native $PyExe @PyArgs -m venv $Venv }
$Py = Join-Path $Venv "Scripts\python.exe"
Invoke-Native $Py -m pip install -q --upgrade pip

# 2. llama-cpp-python in the chosen flavour; the stamp skips the compile when the flags are unchanged.
$Stamp = Join-Path $Venv ".llama-cpp-flags"
$Want = "$LlamaVersion $CmakeFlags"
$Have = if (Test-Path $Stamp) { (Get-Content $Stamp -Raw).Trim() } else { "" }
if ($Have -ne $Want) {
    Write-Host "==> Building llama-cpp-python $LlamaVersion from source (several minutes)"
    if ($CmakeFlags -eq "") {
        Invoke-Native $Py -m pip install "llama-cpp-python==$LlamaVersion"
    } else {
        & $Py -m pip uninstall -q -y llama-cpp-python
        $env:CMAKE_ARGS = $CmakeFlags
        try {
            # --no-cache-dir: never reuse a wheel that pip built earlier with other flags.
            Invoke-Native $Py -m pip install --no-binary llama-cpp-python --no-cache-dir "llama-cpp-python==$LlamaVersion"
        } finally {
            Remove-Item Env:CMAKE_ARGS
        }
    }
    Set-Content -Path $Stamp -Value $Want
}

# 3. Draftlight and its dependencies, and PyInstaller.
Invoke-Native $Py -m pip install -q $Root -r installers\requirements-build.txt

# 4. The build must be the flavour we asked for (a portable CPU build reports no AVX-512).
Invoke-Native $Py installers\check_flavour.py $Flavour

# 5. The bundle: dist\Draftlight\Draftlight.exe (no console) and draftlight-cli.exe (console).
Write-Host "==> PyInstaller"
if (Test-Path dist\Draftlight) { Remove-Item -Recurse -Force dist\Draftlight }
Invoke-Native $Py -m PyInstaller --noconfirm --clean --log-level WARN `
    --distpath dist --workpath build\pyinstaller installers\draftlight.spec

# 6. The bundle must work before it is packed (a CUDA bundle needs the NVIDIA driver to start).
$HasDriver = [bool](Get-Command nvidia-smi -ErrorAction SilentlyContinue)
if (-not $NoSelfTest -and ($Flavour -ne "cuda" -or $HasDriver)) {
    Write-Host "==> Self-test of the bundle"
    Remove-Item Env:QT_QPA_PLATFORM -ErrorAction SilentlyContinue
    Invoke-Native dist\Draftlight\draftlight-cli.exe --self-test
}

# 7. The installer.
if (-not $NoInstaller) {
    $Iscc = (Get-Command iscc.exe -ErrorAction SilentlyContinue).Source
    if (-not $Iscc) {
        $Iscc = @("${env:ProgramFiles(x86)}\Inno Setup 6\ISCC.exe", "$env:ProgramFiles\Inno Setup 6\ISCC.exe") |
            Where-Object { Test-Path $_ } | Select-Object -First 1
    }
    if (-not $Iscc) { throw "Inno Setup 6 (ISCC.exe) not found: install it (choco install innosetup) or pass -NoInstaller" }
    Write-Host "==> Inno Setup"
    Invoke-Native $Iscc "/DAppVersion=$Version" "/DOutputName=$Name-setup" "/DFlavour=$Flavour" installers\windows\draftlight.iss
    Write-Host "==> dist\$Name-setup.exe"
} else {
    Write-Host "==> dist\Draftlight (no installer: -NoInstaller)"
}
